// Paged attention micro-benchmarks (Google Benchmark) on the global pool with 2 threads (or
// VLM_BENCH_THREADS). Counters: GFLOP (per second), GB (of KV read, per second).
//   Prefill: one sequence of S tokens attending causally to itself, H=14, Hkv=2, D=64, f32 KV,
//            block 16; GFLOP/s counts causal flops 2 * 2 * H * D * S*(S+1)/2.
//   Decode:  one query row at context 4096, same heads; GB/s of K+V read; the time of one
//            iteration is the time per token (one layer). DecodeCold cycles through 16 caches.
// The tiled kernel (best f32 tiles for this CPU), the bf16 dot-product tiles (bf16 cache), its
// portable tiles and the naive reference run
// side by side. Results: bench/RESULTS.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/shuffled_cache.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_internal.h"
#include "kernels/core/thread_pool.h"

namespace {

using vlm::DType;

constexpr int kH = 14, kHkv = 2, kD = 64, kB = 16;

enum class Impl { Best, Generic, Ref, Bf16 };

// One sequence of `ctx` cached tokens in shuffled blocks, with the last q_len tokens as queries.
struct Setup {
  std::mt19937 rng{42};
  vlm::bench::ShuffledCache cache;
  vlm::PagedKVLayer& kv = cache.kv;
  int32_t cu[2], ctx_len[1];
  std::vector<float> q, out;
  vlm::AttentionBatch batch;

  Setup(int q_len, int ctx, DType dtype) : cache(ctx, kB, kHkv, kD, dtype, rng) {
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    const int nb = static_cast<int>(cache.table.size());
    std::vector<float> k(static_cast<size_t>(ctx) * kHkv * kD), v(k.size());
    for (auto& x : k) x = uni(rng);
    for (auto& x : v) x = uni(rng);
    vlm::write_kv(kv, k.data(), v.data(), cache.slots.data(), ctx);
    q.resize(static_cast<size_t>(q_len) * kH * kD);
    for (auto& x : q) x = uni(rng);
    out.resize(q.size());
    cu[0] = 0;
    cu[1] = q_len;
    ctx_len[0] = ctx;
    batch = {1, cu, ctx_len, cache.table.data(), nb};
  }

  void run(Impl impl) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
    switch (impl) {
      case Impl::Best:
        vlm::paged_attention(q.data(), kH, kv, batch, scale, out.data());
        break;
      case Impl::Generic:
        vlm::attn::paged_attention_with(vlm::attn::tile_ops_generic(), q.data(), kH, kv, batch,
                                        scale, out.data());
        break;
      case Impl::Bf16:  // the bf16 dot-product tiles (set_bf16_attention's path)
        vlm::attn::paged_attention_with(*vlm::attn::tile_ops_avx512_bf16(), q.data(), kH, kv, batch,
                                        scale, out.data());
        break;
      case Impl::Ref:
        vlm::paged_attention_ref(q.data(), kH, kv, batch, scale, out.data());
        break;
    }
    benchmark::DoNotOptimize(out.data());
  }
};

void BM_Prefill(benchmark::State& state, Impl impl) {
  const int S = static_cast<int>(state.range(0));
  Setup setup(S, S, DType::F32);
  for (auto _ : state) setup.run(impl);
  const double flops = 2.0 * 2.0 * kH * kD * (static_cast<double>(S) * (S + 1) / 2);
  state.counters["GFLOP"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Decode(benchmark::State& state, Impl impl, DType dtype) {
  const int ctx = static_cast<int>(state.range(0));
  if (impl == Impl::Bf16 && !vlm::attn::tile_ops_avx512_bf16()) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  Setup setup(1, ctx, dtype);
  for (auto _ : state) setup.run(impl);
  const double kv_bytes = 2.0 * ctx * kHkv * kD * static_cast<double>(vlm::dtype_size(dtype));
  state.counters["GB"] =
      benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The same decode row, cycling through kLayers caches (64 MiB of f32 KV, more than the L3) as a
// decoder's layers do, so that the KV streams from memory.
void BM_DecodeCold(benchmark::State& state, DType dtype, Impl impl = Impl::Best) {
  constexpr int kLayers = 16;
  const int ctx = static_cast<int>(state.range(0));
  if (impl == Impl::Bf16 && !vlm::attn::tile_ops_avx512_bf16()) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  std::vector<std::unique_ptr<Setup>> layers;
  for (int i = 0; i < kLayers; ++i) layers.push_back(std::make_unique<Setup>(1, ctx, dtype));
  int layer = 0;
  for (auto _ : state) {
    layers[layer]->run(impl);
    layer = (layer + 1) % kLayers;
  }
  const double kv_bytes = 2.0 * ctx * kHkv * kD * static_cast<double>(vlm::dtype_size(dtype));
  state.counters["GB"] =
      benchmark::Counter(kv_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Prefill, tiled_f32, Impl::Best)->Arg(512)->Arg(2048)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, generic_tiles_f32, Impl::Generic)->Arg(512)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, reference_f32, Impl::Ref)->Arg(512)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, tiled_f32, Impl::Best, DType::F32)->Arg(4096)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, tiled_bf16, Impl::Best, DType::BF16)->Arg(4096)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, bf16_dot_tiles, Impl::Bf16, DType::BF16)->Arg(4096)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeCold, bf16_dot_tiles, DType::BF16, Impl::Bf16)->Arg(4096)->Arg(32768)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeCold, tiled_f32, DType::F32)->Arg(4096)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeCold, tiled_bf16, DType::BF16)->Arg(4096)->Arg(32768)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, generic_tiles_f32, Impl::Generic, DType::F32)->Arg(4096)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, reference_f32, Impl::Ref, DType::F32)->Arg(4096)
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

int main(int argc, char** argv) { return vlm::bench::run_google_benchmarks(argc, argv); }
