// linear() on the Qwen2-0.5B shapes (W[N,K]: q/o 896x896, gate/up 4864x896, down 896x4864,
// LM head 151936x896), 2 threads.
//  - prefill/<path>/N/K/M, M = 512 and 2048: the bf16 dot-product path (kernels/gemm/gemm_bf16.cpp)
//    beside the OpenBLAS f32 panel path with the same BF16 W (converted per panel) and with F32
//    W (no conversion), and oneDNN's bf16 matmul when the build found it (VLM_HAVE_DNNL: x
//    converted to bf16 by oneDNN inside the timed call; W either prepacked once outside the
//    timing, "onednn_packed", or read in its stored [N,K] layout, "onednn_plain");
//  - decode/N/K/<path>/M, M = 1, 4, 16: the small-M streaming kernel (f32 activations) and the bf16
//    GEMV kernel (kernels/gemm/gemv_bf16.cpp) on BF16 W; crossover/*: where the packed bf16 path
//    takes over from them (kBf16DotMinM).
// Weights (except oneDNN's) are cycled through copies of >= 256 MiB so every call reads them
// from memory, as a forward pass over many layers does. W_GB = weight bytes per
//    call / time, to compare with the machine's memory read rate.
// Run: build/bin/bench_gemm_qwen --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
//      --benchmark_report_aggregates_only=true   (results: bench/RESULTS.md, "GEMM")
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench/common/bench_util.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/core/tensor.h"
#include "kernels/core/thread_pool.h"

#ifdef VLM_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace {

constexpr int kThreads = 2;
constexpr int64_t kMaxM = 2048;
constexpr int64_t kRotationBytes = int64_t{256} << 20;

struct Shape {
  int64_t N, K;
};
const Shape kPrefillShapes[] = {{896, 896}, {4864, 896}, {896, 4864}};
const Shape kDecodeShapes[] = {{896, 896}, {4864, 896}, {896, 4864}, {151936, 896}};

std::vector<float>& x_data() {
  static std::vector<float> x = [] {
    std::vector<float> v(kMaxM * 4864);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& f : v) f = u(rng);
    return v;
  }();
  return x;
}

std::vector<float>& y_data() {
  static std::vector<float> y(kMaxM * 4864 > 16 * 151936 ? kMaxM * 4864 : 16 * 151936);
  return y;
}

// Copies of a random W[N,K] in dtype dt: one copy, or enough to fill kRotationBytes.
const std::vector<vlm::Tensor>& weights(Shape s, vlm::DType dt, bool rotate) {
  static std::map<std::tuple<int64_t, int64_t, int, bool>, std::vector<vlm::Tensor>> cache;
  auto& ws = cache[{s.N, s.K, static_cast<int>(dt), rotate}];
  if (ws.empty()) {
    std::vector<float> w(s.N * s.K);
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (float& f : w) f = u(rng);
    const int64_t bytes = s.N * s.K * static_cast<int64_t>(vlm::dtype_size(dt));
    const int64_t copies = rotate ? std::max<int64_t>(1, (kRotationBytes + bytes - 1) / bytes) : 1;
    for (int64_t i = 0; i < copies; ++i) {
      ws.push_back(vlm::Tensor::empty({s.N, s.K}, dt));
      vlm::convert_from_f32(w.data(), dt, ws.back().data(), s.N * s.K);
    }
  }
  return ws;
}

void counters(benchmark::State& state, int64_t M, Shape s, int64_t w_bytes) {
  state.counters["GFLOP"] = benchmark::Counter(2.0 * M * s.N * s.K * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_GB"] = benchmark::Counter(static_cast<double>(w_bytes) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

enum class Path { kBf16Dot, kBlasBf16W, kBlasF32W };

void BM_prefill(benchmark::State& state, Path path, Shape s) {
  const int64_t M = state.range(0);
  const vlm::DType dt = path == Path::kBlasF32W ? vlm::DType::F32 : vlm::DType::BF16;
  const auto& ws = weights(s, dt, true);
  size_t i = 0;
  for (auto _ : state) {
    const vlm::TensorView W = ws[i++ % ws.size()].view();
    if (path == Path::kBf16Dot)
      vlm::gemm_detail::linear_bf16_dot(x_data().data(), M, W, nullptr, y_data().data());
    else
      vlm::gemm_detail::linear_blas(x_data().data(), M, W, nullptr, y_data().data());
    benchmark::ClobberMemory();
  }
  counters(state, M, s, ws[0].nbytes());
}

// The bf16 path on the down projection (K = 4864) with K chunks of `pairs` bf16 pairs.
void BM_chunk(benchmark::State& state, Shape s) {
  const int64_t M = 512, pairs = state.range(0);
  const auto& ws = weights(s, vlm::DType::BF16, true);
  size_t i = 0;
  for (auto _ : state) {
    vlm::gemm_detail::linear_bf16_dot(x_data().data(), M, ws[i++ % ws.size()].view(), nullptr,
                                      y_data().data(), pairs);
    benchmark::ClobberMemory();
  }
  counters(state, M, s, ws[0].nbytes());
}

// gemv: the bf16 GEMV kernel (bf16 activations, kernels/gemm/gemv_bf16.cpp), else the small-M
// kernel (f32 activations).
void BM_decode(benchmark::State& state, Shape s, bool gemv) {
  const int64_t M = state.range(0);
  const auto& ws = weights(s, vlm::DType::BF16, true);
  size_t i = 0;
  for (auto _ : state) {
    const vlm::TensorView W = ws[i++ % ws.size()].view();
    if (gemv)
      vlm::gemm_detail::linear_gemv_bf16(x_data().data(), M, W, nullptr, y_data().data());
    else
      vlm::gemm_detail::linear_small_m(x_data().data(), M, W, nullptr, y_data().data());
    benchmark::ClobberMemory();
  }
  counters(state, M, s, ws[0].nbytes());
}

#ifdef VLM_HAVE_DNNL
// y[M,N] = bf16(x)[M,K] · W^T with W given as a bf16 [K,N] matrix of tag "ba" (its [N,K] memory).
void BM_onednn(benchmark::State& state, Shape s, bool packed) {
  using namespace dnnl;
  const int64_t M = state.range(0);
  const vlm::TensorView W = weights(s, vlm::DType::BF16, false)[0].view();
  engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  memory::desc x_f32({M, s.K}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc x_bf16({M, s.K}, memory::data_type::bf16, memory::format_tag::ab);
  memory::desc w_plain({s.K, s.N}, memory::data_type::bf16, memory::format_tag::ba);
  memory::desc w_any({s.K, s.N}, memory::data_type::bf16, memory::format_tag::any);
  memory::desc y_md({M, s.N}, memory::data_type::f32, memory::format_tag::ab);
  matmul::primitive_desc pd(matmul::desc(x_bf16, packed ? w_any : w_plain, y_md), eng);
  matmul mm(pd);
  memory xm(x_f32, eng, x_data().data()), xb(x_bf16, eng);
  memory wm(w_plain, eng, const_cast<void*>(W.data)), ym(y_md, eng, y_data().data());
  memory wp = wm;
  if (packed) {
    wp = memory(pd.weights_desc(), eng);
    reorder(wm, wp).execute(strm, wm, wp);
  }
  reorder to_bf16(xm, xb);
  for (auto _ : state) {
    to_bf16.execute(strm, xm, xb);
    mm.execute(strm, {{DNNL_ARG_SRC, xb}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_DST, ym}});
    strm.wait();
    benchmark::ClobberMemory();
  }
  counters(state, M, s, W.nbytes());
}
#endif

// Wall time by default; with VLM_BENCH_CPU_TIME=1 the process's CPU time (all threads), so
// rates read per CPU-second: a comparison of kernels that holds on a loaded machine.
benchmark::internal::Benchmark* timing(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond);
  const char* cpu = std::getenv("VLM_BENCH_CPU_TIME");
  return (cpu && std::string(cpu) == "1") ? b->MeasureProcessCPUTime() : b->UseRealTime();
}

std::string shape_name(Shape s) { return std::to_string(s.N) + "x" + std::to_string(s.K); }

void register_all() {
  for (Shape s : kPrefillShapes) {
    const std::string n = shape_name(s);
    for (auto [path, name] : {std::pair{Path::kBf16Dot, "bf16_dot"},
                              std::pair{Path::kBlasBf16W, "blas_bf16W"},
                              std::pair{Path::kBlasF32W, "blas_f32W"}})
      timing(benchmark::RegisterBenchmark(("prefill/" + n + "/" + name).c_str(), BM_prefill, path, s))
          ->Arg(512)->Arg(2048);
#ifdef VLM_HAVE_DNNL
    for (bool packed : {true, false})
      timing(benchmark::RegisterBenchmark(
          ("prefill/" + n + (packed ? "/onednn_packed" : "/onednn_plain")).c_str(), BM_onednn, s,
          packed))
          ->Arg(512)->Arg(2048);
#endif
  }
  // Where the bf16 path takes over from the small-M kernel (kBf16DotMinM).
  for (int64_t M : {4, 8, 12, 16, 24, 32, 48, 64, 128})
    for (Path path : {Path::kBf16Dot}) {
      Shape s{4864, 896};
      timing(benchmark::RegisterBenchmark(("crossover/" + shape_name(s) + "/bf16_dot").c_str(),
                                   BM_prefill, path, s))
          ->Arg(M);
      timing(benchmark::RegisterBenchmark(("crossover/" + shape_name(s) + "/small_m").c_str(),
                                   BM_decode, s, false))
          ->Arg(M);
      if (vlm::gemm_detail::bf16_dot_supported())
        timing(benchmark::RegisterBenchmark(("crossover/" + shape_name(s) + "/gemv_bf16").c_str(),
                                     BM_decode, s, true))
            ->Arg(M);
    }
  for (int64_t pairs : {256, 512, 816, 1216, 2432})
    timing(benchmark::RegisterBenchmark("chunk/896x4864/512", BM_chunk, Shape{896, 4864}))
        ->Arg(pairs);
  for (Shape s : kDecodeShapes) {
    timing(benchmark::RegisterBenchmark(("decode/" + shape_name(s) + "/small_m").c_str(), BM_decode, s, false))
        ->Arg(1)->Arg(4)->Arg(16);
    if (vlm::gemm_detail::bf16_dot_supported())
      timing(benchmark::RegisterBenchmark(("decode/" + shape_name(s) + "/gemv_bf16").c_str(), BM_decode, s, true))
          ->Arg(1)->Arg(4)->Arg(16);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS picks its kernels at run time; OPENBLAS_CORETYPE overrides (e.g. Haswell = AVX2).
  return vlm::bench::run_google_benchmarks(argc, argv, kThreads, {{"openblas_core", openblas_get_corename()}}, [] {
    register_all();
  });
}
