// Linear layers on the GPU through cuBLASLt: y[M, N] = x[M, K] . w[N, K]^T (+ bias[N]) (+ beta * y),
// row-major, as kernels/gemm's linear() on the CPU. Inputs x and w share one type (F32, BF16,
// F16); y is that type or F32 (bf16/f16 inputs accumulate in f32 either way). beta = 1 adds into
// y (the residual add fused into the GEMM); bias has y's type.
// The f32 path uses CUBLAS_COMPUTE_32F (no TF32: the exact path); 16-bit inputs use the tensor
// cores. Algorithms come from cuBLASLt's heuristic, cached per shape; with set_autotune(min_rows),
// a shape of >= min_rows rows instead times the heuristic's first kAutotuneCandidates algorithms
// once, on its first call (outside stream capture; y is saved and restored around the trials,
// so the call's result is as without tuning), and keeps the fastest. Not thread-safe: one
// CublasLtGemm per stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/device_buffer.h"

namespace vlm::cuda {

class CublasLtGemm {
 public:
  CublasLtGemm();
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Enqueues y = x . w^T (+ bias) (+ beta * y) on `s`. M == 0 is a no-op. Throws InternalError
  // when cuBLASLt has no algorithm for the shape/types.
  void linear(const void* x /*[M, K]*/, const void* w /*[N, K]*/, DType in_dt, const void* bias /*[N] or null*/,
              void* y /*[M, N]*/, DType out_dt, float beta, int64_t M, int64_t N, int64_t K, cudaStream_t s);

  // Shapes of at least min_rows rows are tuned by timing (0: never, the default). The
  // environment's VLM_GEMM_AUTOTUNE=0 turns it off whatever this says (a measuring aid).
  void set_autotune(int64_t min_rows);
  static constexpr int kAutotuneCandidates = 8;

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, bool, bool>;
  Plan& plan(const Key& key, const void* x, const void* w, const void* bias, void* y, float beta, cudaStream_t s);
  // Times `n` candidate algorithms of p on the real operands and stores the fastest in p.algo.
  void tune(Plan& p, const void* algos, int n, const void* x, const void* w, void* y, size_t y_bytes, float beta,
            cudaStream_t s);

  void* handle_ = nullptr;  // cublasLtHandle_t
  DeviceBuffer workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  int64_t autotune_min_rows_ = 0;
  std::map<Key, cublasLtMatmulAlgo_t> tuned_;  // per power-of-two bucket of rows
};

}  // namespace vlm::cuda
