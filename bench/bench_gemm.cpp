// linear() (kernels/gemm/gemm.h) at N = K = 4096 for F32 and BF16 weights, side by side with plain
// OpenBLAS cblas_sgemm on its own threads as the machine's reference rate; then the two internal
// paths of linear() at the same M, which set kSmallM.
// Counters (per second): GFLOP = 2*M*N*K / time; W_GB = weight bytes read per call / time (the
// rate that bounds decode, M = 1).
// Run: build/bin/bench_gemm --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
//      --benchmark_report_aggregates_only=true   (results: bench/RESULTS.md)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/core/tensor.h"
#include "kernels/core/thread_pool.h"

namespace {

constexpr int64_t kN = 4096, kK = 4096, kMaxM = 512;
constexpr int kThreads = 2;

// Weights are cycled through copies of 128 MB in all (4x the 32 MB L3), so every call reads
// its weights from memory as a decode step over many layers does, not from the cache.
constexpr int64_t kRotationBytes = int64_t{128} << 20;

struct Data {
  std::vector<float> x;             // [kMaxM, kK]
  std::vector<float> y;             // [kMaxM, kN]
  std::vector<vlm::Tensor> w_f32;   // copies of [kN, kK]
  std::vector<vlm::Tensor> w_bf16;  // copies of [kN, kK]
  std::vector<float> bias;          // [kN]
  const std::vector<vlm::Tensor>& weights(vlm::DType dt) const {
    return dt == vlm::DType::F32 ? w_f32 : w_bf16;
  }
};

Data& data() {
  static Data d = [] {
    Data d;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    d.x.resize(kMaxM * kK);
    for (float& v : d.x) v = u(rng);
    d.y.resize(kMaxM * kN);
    std::vector<float> w(kN * kK);
    for (float& v : w) v = u(rng) * 0.05f;
    for (int64_t i = 0; i < kRotationBytes / (kN * kK * 4); ++i) {
      d.w_f32.push_back(vlm::Tensor::empty({kN, kK}, vlm::DType::F32));
      vlm::convert_from_f32(w.data(), vlm::DType::F32, d.w_f32.back().data(), kN * kK);
    }
    for (int64_t i = 0; i < kRotationBytes / (kN * kK * 2); ++i) {
      d.w_bf16.push_back(vlm::Tensor::empty({kN, kK}, vlm::DType::BF16));
      vlm::convert_from_f32(w.data(), vlm::DType::BF16, d.w_bf16.back().data(), kN * kK);
    }
    d.bias.assign(kN, 0.0f);
    return d;
  }();
  return d;
}

void set_counters(benchmark::State& state, int64_t M, int64_t w_bytes) {
  state.counters["GFLOP"] = benchmark::Counter(2.0 * M * kN * kK * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_GB"] = benchmark::Counter(static_cast<double>(w_bytes) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_linear(benchmark::State& state, vlm::DType dt) {
  const int64_t M = state.range(0);
  Data& d = data();
  const std::vector<vlm::Tensor>& ws = d.weights(dt);
  size_t i = 0;
  for (auto _ : state) {
    const vlm::Tensor& W = ws[i++ % ws.size()];
    vlm::linear(d.x.data(), M, W.view(), d.bias.data(), d.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, M, ws[0].nbytes());
}

void BM_openblas_sgemm(benchmark::State& state) {
  const int64_t M = state.range(0);
  Data& d = data();
  openblas_set_num_threads(kThreads);  // OpenBLAS's own threading, for this baseline only
  size_t i = 0;
  for (auto _ : state) {
    const vlm::Tensor& W = d.w_f32[i++ % d.w_f32.size()];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, kN, kK, 1.0f, d.x.data(), kK,
                W.as<float>(), kK, 0.0f, d.y.data(), kN);
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);  // back to the server's setting: parallelism via our pool
  set_counters(state, M, d.w_f32[0].nbytes());
}

// The two paths of linear() around the M where one hands over to the other (kSmallM):
// row_group > 0: the small-M kernel with that row group; 0: the OpenBLAS panel path.
void BM_path(benchmark::State& state, vlm::DType dt, int64_t row_group) {
  const int64_t M = state.range(0);
  Data& d = data();
  const std::vector<vlm::Tensor>& ws = d.weights(dt);
  size_t i = 0;
  for (auto _ : state) {
    const vlm::TensorView W = ws[i++ % ws.size()].view();
    if (row_group > 0)
      vlm::gemm_detail::linear_small_m(d.x.data(), M, W, nullptr, d.y.data(), row_group);
    else
      vlm::gemm_detail::linear_blas(d.x.data(), M, W, nullptr, d.y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, M, ws[0].nbytes());
}

void register_all() {
  for (int64_t M : {1, 8, 64, 512}) {
    benchmark::RegisterBenchmark("linear/F32", BM_linear, vlm::DType::F32)
        ->Arg(M)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark("linear/BF16", BM_linear, vlm::DType::BF16)
        ->Arg(M)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark("openblas_sgemm/F32", BM_openblas_sgemm)
        ->Arg(M)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  for (int64_t M : {8, 32, 64, 128, 512})
    for (vlm::DType dt : {vlm::DType::F32, vlm::DType::BF16})
      for (int64_t group : {vlm::gemm_detail::kDefaultRowGroup, int64_t{0}}) {
        const std::string name =
            std::string(group ? "path_small_m/" : "path_blas/") + vlm::dtype_name(dt);
        benchmark::RegisterBenchmark(name.c_str(), BM_path, dt, group)
            ->Arg(M)->Unit(benchmark::kMillisecond)->UseRealTime();
      }
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS picks its kernels at run time; OPENBLAS_CORETYPE overrides (e.g. Haswell = AVX2).
  return vlm::bench::run_google_benchmarks(argc, argv, kThreads, {{"openblas_core", openblas_get_corename()}}, [] {
    data();  // build the inputs outside the timed runs
    register_all();
  });
}
