// SinkRouter decode-attention micro-benchmarks (Google Benchmark), one layer, side by side:
//   dense:   paged_attention (the exact path) on a decode batch;
//   routed:  the whole routed path per step — group scores against the anchors, tau(L), then
//            group_skip_decode_attention (sink groups write the zero surrogate, read no KV).
// Batch: 5 sequences of context L (4K-32K) with Qwen2-0.5B attention shapes (H=14, Hkv=2,
// D=64), bf16 KV in shuffled blocks of 16: 10 kv groups, so planting 0/4/6/8 sink groups gives
// skip ratios 0/40/60/80 %. Planted (synthetic, anchor-dominated) input: in a sink group every
// query head is the anchor key times 4 plus noise (cosine ~0.9); other groups have random
// queries (cosine ~0). The counter skip_ratio is what the router actually decided (tau = 0.5).
// Random weights/inputs have no real sinks: their skip ratio is the 0-planted case (~0).
// Threads: the global pool with 2 threads (or VLM_BENCH_THREADS). GB/s counts the K+V bytes
// of the *dense* read, so routed GB/s above dense GB/s is skipped traffic. Results: RESULTS.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/common/bench_util.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/sink_router/first_token_kv.h"
#include "kernels/sink_router/group_skip_decode.h"
#include "kernels/sink_router/sink_router_config.h"
#include "kernels/sink_router/sink_routing.h"
#include "kernels/core/thread_pool.h"

namespace {

using vlm::DType;

constexpr int kH = 14, kHkv = 2, kD = 64, kG = kH / kHkv, kB = 16, kSeqs = 5;

struct Setup {
  std::vector<uint16_t> kbuf, vbuf;
  vlm::PagedKVLayer kv;
  std::vector<int32_t> tables, cu, ctx, q_rows;
  std::vector<float> q, out, anchor_k, anchor_v;  // q[S,H,D]; anchors [S,Hkv,D]
  int max_blocks;

  Setup(int L, int planted) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::normal_distribution<float> nd;
    max_blocks = (L + kB - 1) / kB;
    const int nb = max_blocks * kSeqs;
    kv = vlm::PagedKVLayer{nullptr, nullptr, DType::BF16, nb, kB, kHkv, kD};
    kbuf.resize(static_cast<size_t>(nb) * kv.block_stride());
    vbuf.resize(kbuf.size());
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    std::vector<int32_t> perm(nb);
    for (int i = 0; i < nb; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(perm.begin(), perm.end());
    cu.push_back(0);
    std::vector<float> k(static_cast<size_t>(L) * kHkv * kD), v(k.size());
    std::vector<int32_t> slots(L);
    for (int s = 0; s < kSeqs; ++s) {
      for (auto& x : k) x = uni(rng);
      for (auto& x : v) x = uni(rng);
      for (int j = 0; j < L; ++j) slots[j] = tables[static_cast<size_t>(s) * max_blocks + j / kB] * kB + j % kB;
      vlm::write_kv(kv, k.data(), v.data(), slots.data(), L);
      cu.push_back(s + 1);
      ctx.push_back(L);
      q_rows.push_back(s);
    }
    anchor_k.resize(static_cast<size_t>(kSeqs) * kHkv * kD);
    anchor_v.resize(anchor_k.size());
    for (int s = 0; s < kSeqs; ++s)
      vlm::load_first_token_kv(kv, tables[static_cast<size_t>(s) * max_blocks],
                               anchor_k.data() + static_cast<size_t>(s) * kHkv * kD,
                               anchor_v.data() + static_cast<size_t>(s) * kHkv * kD);
    q.resize(static_cast<size_t>(kSeqs) * kH * kD);
    for (auto& x : q) x = uni(rng);
    for (int i = 0; i < planted; ++i) {  // group i of the batch: sequence i / Hkv, kv head i % Hkv
      const int s = i / kHkv, g = i % kHkv;
      const float* a = anchor_k.data() + (static_cast<size_t>(s) * kHkv + g) * kD;
      for (int h = 0; h < kG; ++h)
        for (int d = 0; d < kD; ++d)
          q[(static_cast<size_t>(s) * kH + g * kG + h) * kD + d] = 4.0f * a[d] + 0.3f * nd(rng);
    }
    out.resize(q.size());
  }
  double kv_bytes() const { return 2.0 * kSeqs * ctx[0] * kHkv * kD * 2; }
};

void BM_Dense(benchmark::State& state) {
  Setup st(static_cast<int>(state.range(0)), 0);
  const vlm::AttentionBatch b{kSeqs, st.cu.data(), st.ctx.data(), st.tables.data(), st.max_blocks};
  for (auto _ : state) {
    vlm::paged_attention(st.q.data(), kH, st.kv, b, 0.125f, st.out.data());
    benchmark::DoNotOptimize(st.out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(st.kv_bytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["skip_ratio"] = 0;
}

void BM_Routed(benchmark::State& state) {
  const int planted = static_cast<int>(state.range(1));
  Setup st(static_cast<int>(state.range(0)), planted);
  vlm::SinkRouterConfig cfg;  // tau = 0.5, min over the group
  const vlm::DecodeBatch b{kSeqs, st.q_rows.data(), st.ctx.data(), st.tables.data(), st.max_blocks};
  std::vector<uint8_t> skip(static_cast<size_t>(kSeqs) * kHkv);
  float scores[kHkv];
  int skipped = 0;
  for (auto _ : state) {
    skipped = 0;
    for (int s = 0; s < kSeqs; ++s) {
      vlm::sink_group_scores(st.q.data() + static_cast<size_t>(s) * kH * kD, kH,
                             st.anchor_k.data() + static_cast<size_t>(s) * kHkv * kD, kHkv, kD, cfg.aggregation,
                             scores);
      skipped += vlm::sink_route_groups(scores, kHkv, cfg.threshold(st.ctx[s]), skip.data() + s * kHkv);
    }
    vlm::group_skip_decode_attention(st.q.data(), kH, st.kv, b, skip.data(), nullptr, 0.125f, st.out.data());
    benchmark::DoNotOptimize(st.out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(st.kv_bytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["skip_ratio"] = static_cast<double>(skipped) / (kSeqs * kHkv);
}

void lengths(benchmark::internal::Benchmark* b, bool routed) {
  for (int L : {4096, 8192, 16384, 32768}) {
    if (!routed) {
      b->Args({L});
      continue;
    }
    for (int planted : {0, 4, 6, 8}) b->Args({L, planted});
  }
}

}  // namespace

BENCHMARK(BM_Dense)->Apply([](auto* b) { lengths(b, false); })->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_Routed)->Apply([](auto* b) { lengths(b, true); })->Unit(benchmark::kMicrosecond)->UseRealTime();

int main(int argc, char** argv) { return vlm::bench::run_google_benchmarks(argc, argv); }
