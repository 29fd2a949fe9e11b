#include "kernels/cuda/gemm/cublaslt_gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw InternalError(fmt::format("cuBLASLt {} failed: cublasStatus_t {}", what, static_cast<int>(st)));
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: unsupported_dtype(dt);
  }
}

}  // namespace

// One shape's descriptors and chosen algorithm. Row-major y[M,N] = x[M,K] w[N,K]^T is, in
// cuBLAS's column-major terms, y^T[N,M] = op_T(w)[N,K] . x^T[K,M] (a "TN" GEMM).
struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

CublasLtGemm::CublasLtGemm() : workspace_(kWorkspaceBytes) {
  cublasLtHandle_t h = nullptr;
  check_lt(cublasLtCreate(&h), "create");
  handle_ = h;
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void CublasLtGemm::set_autotune(int64_t min_rows) {
  const char* e = std::getenv("VLM_GEMM_AUTOTUNE");
  autotune_min_rows_ = e != nullptr && std::string(e) == "0" ? 0 : min_rows;
}

CublasLtGemm::Plan& CublasLtGemm::plan(const Key& key, const void* x, const void* w, const void* bias, void* y,
                                       float beta, cudaStream_t s) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const auto [M, N, K, in_i, out_i, has_bias, accumulate] = key;
  const DType in_dt = static_cast<DType>(in_i), out_dt = static_cast<DType>(out_i);
  auto p = std::make_unique<Plan>();
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // never TF32: exact on f32 inputs
  check_lt(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F), "matmul desc");
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)), "transa");
  check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)), "transb");
  if (has_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "epilogue");
    const cudaDataType_t bt = cuda_type(out_dt);
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), "bias type");
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  }
  check_lt(cublasLtMatrixLayoutCreate(&p->a, cuda_type(in_dt), K, N, K), "layout w");
  check_lt(cublasLtMatrixLayoutCreate(&p->b, cuda_type(in_dt), K, M, K), "layout x");
  check_lt(cublasLtMatrixLayoutCreate(&p->c, cuda_type(out_dt), N, M, N), "layout y");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  VLM_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  const bool tune_it = autotune_min_rows_ > 0 && M >= autotune_min_rows_ && capture == cudaStreamCaptureStatusNone;
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const size_t ws = workspace_.bytes();
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
           "preference workspace");
  cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates] = {};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c, p->c, pref,
                                     tune_it ? kAutotuneCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(st, "heuristic");
  if (found == 0)
    throw InternalError(fmt::format("cuBLASLt has no algorithm for {}x{}x{} {} -> {}{}", M, N, K, dtype_name(in_dt),
                                    dtype_name(out_dt), has_bias ? " with bias" : ""));
  p->algo = results[0].algo;
  if (tune_it && found > 1) {
    // One tuning per power-of-two bucket of rows: a step of another row count in the bucket reuses
    // the bucket's algorithm where cuBLASLt accepts it for this shape.
    int64_t bucket = 1;
    while (bucket < M) bucket *= 2;
    const Key bkey{bucket, N, K, in_i, out_i, has_bias, accumulate};
    auto tuned = tuned_.find(bkey);
    cublasLtMatmulHeuristicResult_t check{};
    if (tuned != tuned_.end() &&
        cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c, p->c,
                                &tuned->second, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= ws) {
      p->algo = tuned->second;
    } else {
      cublasLtMatmulAlgo_t algos[kAutotuneCandidates];
      for (int i = 0; i < found; ++i) algos[i] = results[i].algo;
      tune(*p, algos, found, x, w, y, static_cast<size_t>(M * N) * dtype_size(out_dt), beta, s);
      tuned_[bkey] = p->algo;
    }
  }
  (void)accumulate;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void CublasLtGemm::tune(Plan& p, const void* algos_v, int n, const void* x, const void* w, void* y, size_t y_bytes,
                        float beta, cudaStream_t s) {
  const auto* algos = static_cast<const cublasLtMatmulAlgo_t*>(algos_v);
  void* saved = nullptr;  // y's contents when the GEMM accumulates into it
  if (beta != 0.0f) {
    if (cudaMallocAsync(&saved, y_bytes, s) != cudaSuccess) {
      (void)cudaGetLastError();
      return;  // no memory to spare for the trials: keep the heuristic's first choice
    }
    VLM_CUDA_CHECK(cudaMemcpyAsync(saved, y, y_bytes, cudaMemcpyDeviceToDevice, s));
  }
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  VLM_CUDA_CHECK(cudaEventCreate(&t0));
  VLM_CUDA_CHECK(cudaEventCreate(&t1));
  const float alpha = 1.0f;
  float best = 0.0f;
  for (int i = 0; i < n; ++i) {
    auto run = [&] {
      return cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y,
                            p.c, &algos[i], workspace_.get(), workspace_.bytes(), s);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; an algorithm that refuses is skipped
    VLM_CUDA_CHECK(cudaEventRecord(t0, s));
    for (int r = 0; r < 3; ++r) check_lt(run(), "matmul (autotune)");
    VLM_CUDA_CHECK(cudaEventRecord(t1, s));
    VLM_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0.0f;
    VLM_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    if (best == 0.0f || ms < best) {
      best = ms;
      p.algo = algos[i];
    }
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  if (saved) {
    VLM_CUDA_CHECK(cudaMemcpyAsync(y, saved, y_bytes, cudaMemcpyDeviceToDevice, s));
    VLM_CUDA_CHECK(cudaFreeAsync(saved, s));
  }
}

void CublasLtGemm::linear(const void* x, const void* w, DType in_dt, const void* bias, void* y, DType out_dt,
                          float beta, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  if (M == 0) return;
  Plan& p = plan(Key{M, N, K, static_cast<int>(in_dt), static_cast<int>(out_dt), bias != nullptr, beta != 0.0f}, x, w,
                 bias, y, beta, s);
  if (bias)
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  const float alpha = 1.0f;
  check_lt(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                          &p.algo, workspace_.get(), workspace_.bytes(), s),
           "matmul");
}

}  // namespace vlm::cuda

