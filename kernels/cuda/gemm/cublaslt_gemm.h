// Linear layers on the GPU through cuBLASLt: y[M, N] = x[M, K] . w[N, K]^T (+ bias[N]) (+ beta * y),
// row-major, as kernels/gemm's linear() on the CPU. Inputs x and w share one type (F32, BF16,
// F16); y is that type or F32 (bf16/f16 inputs accumulate in f32 either way). beta = 1 adds into
// y (the residual add fused into the GEMM); bias has y's type.
// The f32 path uses CUBLAS_COMPUTE_32F (no TF32: the exact path); 16-bit inputs use the tensor
// cores. Algorithms come from cuBLASLt's heuristic, cached per shape. Not thread-safe: one
// CublasLtGemm per stream.
// linear_fp8: the same product over FP8 E4M3 inputs with per-row scales, on the FP8 tensor cores
// (Hopper, sm_90: cuBLASLt's outer-vector scaling is SM90-only, CUDA 12.9+), the scales applied in
// cuBLASLt's epilogue: y[m, n] = (sum_k xq[m,k] wq[n,k]) * x_scale[m] * w_scale[n] (+ bias[n])
// (+ beta * y); y BF16 or F32, bias BF16 (cuBLASLt's bias type for FP8 inputs either way).
// K % 16 == 0 (cuBLASLt's FP8 layouts). kernels/cuda/gemm/fp8_quantize.h's fp8_gemm_naive is its
// reference.
// Autotuning (kernels/cuda/gemm/cublaslt_autotune.h; LtAutotune, VLM_CUBLASLT_AUTOTUNE=1, default
// off): for products of M <= kAutotuneMaxRows rows (decode steps) the heuristic is asked for up to
// 32 candidates instead of 1 (plus split-K forms of its first unsplit ones, up to 24), and the
// first call of a shape made outside a graph capture times them on its operands (into a scratch
// output, y untouched) and keeps the fastest that matches the heuristic-first's output, cached per
// process by M's power-of-two bucket, N, K and types (a shape of 17..32 rows takes what the first
// of them chose, where cublasLtMatmulAlgoCheck accepts it); logged at debug level. That first call
// synchronizes the stream. A call on a capturing stream never times: it runs the heuristic's first
// (or the process cache's) algorithm and leaves the tuning to the next call outside a capture
// (AutotuneStats::deferred). Numerics: every candidate accumulates in f32 (16-bit outputs: split-K
// partials only in f32, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE); algorithms differ by summation
// order and split-K, i.e. f32 rounding before the output's one rounding. Every algorithm runs in
// the one fixed workspace (graph-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/device_buffer.h"

namespace vlm::cuda {

enum class LtAutotune { FromEnv, Off, On };
// VLM_CUBLASLT_AUTOTUNE as read once (kernels/core/env_switch.h: unset -> off).
bool lt_autotune_env();

class CublasLtGemm {
 public:
  static constexpr int64_t kAutotuneMaxRows = 64;
  struct AutotuneStats {
    int64_t tuned = 0;     // shapes timed by this instance
    int64_t changed = 0;   // of which another algorithm than the heuristic's first won
    int64_t cached = 0;    // shapes taken from the process cache (tuned earlier, this M's bucket)
    int64_t deferred = 0;  // calls on a capturing stream that left an untuned shape untuned
    int64_t single = 0;    // shapes the heuristic offered one algorithm for (nothing to time)
  };

  explicit CublasLtGemm(LtAutotune autotune = LtAutotune::FromEnv);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues y = x . w^T (+ bias) (+ beta * y) on `s`. M == 0 is a no-op. Throws InternalError
  // when cuBLASLt has no algorithm for the shape/types.
  void linear(const void* x /*[M, K]*/, const void* w /*[N, K]*/, DType in_dt, const void* bias /*[N] or null*/,
              void* y /*[M, N]*/, DType out_dt, float beta, int64_t M, int64_t N, int64_t K, cudaStream_t s);
  // Returns false, enqueuing nothing, when cuBLASLt takes no per-row-scaled FP8 product with this
  // output / bias / beta and `tmp` is null; given tmp [M, N] f32 (device) it then runs an unfused
  // form: the per-row-scaled GEMM into tmp and fp8_scale_epilogue (bias, y +=), or, where cuBLASLt
  // refuses per-row scales altogether (its heuristic answered CUBLAS_STATUS_INVALID_VALUE on the
  // H200 of 2026-11-29), the unscaled FP8 GEMM into tmp and fp8_scale_epilogue applying both
  // scales. Learned per shape on the first call (make that call outside a graph capture).
  bool linear_fp8(const void* xq /*[M, K] E4M3*/, const float* x_scale /*[M]*/, const void* wq /*[N, K] E4M3*/,
                  const float* w_scale /*[N]*/, const void* bias /*[N] BF16 or null*/, void* y /*[M, N]*/,
                  DType out_dt, float beta, int64_t M, int64_t N, int64_t K, cudaStream_t s, float* tmp = nullptr);

  bool autotune() const { return autotune_; }
  const AutotuneStats& autotune_stats() const { return stats_; }

 private:
  struct Plan;
  // M, N, K, in dtype, out dtype, bias, beta != 0, FP8 with per-row (outer-vector) scales.
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, bool, bool, bool>;
  Plan& plan(const Key& key);
  Plan* try_plan(const Key& key);  // null where cuBLASLt has no algorithm (remembered)
  // cublasLtMatmul's status (cublasStatus_t) for one FP8 product over p's descriptors with `algo`
  // (a cublasLtMatmulAlgo_t).
  int run_fp8(Plan& p, const void* algo, const void* xq, const float* x_scale, const void* wq, const float* w_scale,
              const void* bias, void* y, float beta, cudaStream_t s);
  // The FP8 product of a plan without scale modes (tensor-wide scales left at 1) into tmp f32.
  int run_fp8_unscaled(Plan& p, const void* algo, const void* xq, const void* wq, float* tmp, cudaStream_t s);

  // One product over a plan with algorithm `algo` (a cublasLtMatmulAlgo_t) into `out`: its status.
  using RunAlgo = std::function<int(const void* algo, void* out)>;
  // Times p's candidates once (see above) unless done, deferred, or cached.
  void tune(Plan& p, const Key& key, cudaStream_t s, const RunAlgo& run);

  bool autotune_ = false;
  AutotuneStats stats_;
  void* handle_ = nullptr;  // cublasLtHandle_t
  DeviceBuffer workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  // Keys cuBLASLt has no algorithm for (any type), or refused at the matmul (FP8: then run unfused).
  std::map<Key, bool> refused_;
};

}  // namespace vlm::cuda
