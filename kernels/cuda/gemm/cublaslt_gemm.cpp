#include "kernels/cuda/gemm/cublaslt_gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "kernels/core/check.h"
#include "kernels/core/env_switch.h"
#include "kernels/core/log.h"
#include "kernels/cuda/gemm/cublaslt_autotune.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/gemm/fp8_quantize.h"

namespace vlm::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr int kAutotuneCandidates = 32, kAutotuneSplitVariants = 24;

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw InternalError(fmt::format("cuBLASLt {} failed: cublasStatus_t {}", what, static_cast<int>(st)));
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    case DType::F8_E4M3: return CUDA_R_8F_E4M3;
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
  // Autotuning: done (or not wanted) once `tuned`; until then the candidates to time, the
  // heuristic's first (algo) at [0].
  bool tuned = true;
  std::vector<cublasLtMatmulAlgo_t> candidates;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

bool lt_autotune_env() {
  static const bool on = env_switch("VLM_CUBLASLT_AUTOTUNE", false);
  return on;
}

CublasLtGemm::CublasLtGemm(LtAutotune autotune)
    : autotune_(autotune == LtAutotune::On || (autotune == LtAutotune::FromEnv && lt_autotune_env())),
      workspace_(kWorkspaceBytes) {
  cublasLtHandle_t h = nullptr;
  check_lt(cublasLtCreate(&h), "create");
  handle_ = h;
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

CublasLtGemm::Plan& CublasLtGemm::plan(const Key& key) {
  if (Plan* p = try_plan(key)) return *p;
  const auto [M, N, K, in_i, out_i, has_bias, accumulate, outer] = key;
  (void)accumulate;
  (void)outer;
  const DType in_dt = static_cast<DType>(in_i), out_dt = static_cast<DType>(out_i);
  throw InternalError(fmt::format("cuBLASLt has no algorithm for {}x{}x{} {} -> {}{}{}", M, N, K, dtype_name(in_dt),
                                  dtype_name(out_dt), has_bias ? " with bias" : "",
                                  in_dt == DType::F8_E4M3 ? " (FP8 with per-row scales: sm_90, cuBLASLt 12.9+)" : ""));
}

CublasLtGemm::Plan* CublasLtGemm::try_plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  if (refused_.count(key)) return nullptr;
  const auto [M, N, K, in_i, out_i, has_bias, accumulate, outer] = key;
  const DType in_dt = static_cast<DType>(in_i), out_dt = static_cast<DType>(out_i);
  auto p = std::make_unique<Plan>();
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // never TF32: exact on f32 inputs
  check_lt(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F), "matmul desc");
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)), "transa");
  check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)), "transb");
  const bool fp8 = in_dt == DType::F8_E4M3;
  if (fp8 && outer) {  // per-row scales of w (cuBLAS's A: N values) and x (B: M values) in the epilogue
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)), "A scale mode");
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)), "B scale mode");
    // A scale mode other than the scalar one needs its scale pointers set before the heuristic is
    // asked (else CUBLAS_STATUS_INVALID_VALUE, "requires a custom pointer": cuBLASLt's log quoted in
    // NVIDIA/CUDALibrarySamples#274; what call 4 of session 15 hit). A placeholder device address
    // here; run_fp8 sets the real ones before every product.
    const void* placeholder = workspace_.get();
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder,
                                            sizeof(placeholder)),
             "A scale pointer");
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder,
                                            sizeof(placeholder)),
             "B scale pointer");
  }
  if (has_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "epilogue");
    const cudaDataType_t bt = fp8 ? CUDA_R_16BF : cuda_type(out_dt);
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), "bias type");
  }
  check_lt(cublasLtMatrixLayoutCreate(&p->a, cuda_type(in_dt), K, N, K), "layout w");
  check_lt(cublasLtMatrixLayoutCreate(&p->b, cuda_type(in_dt), K, M, K), "layout x");
  check_lt(cublasLtMatrixLayoutCreate(&p->c, cuda_type(out_dt), N, M, N), "layout y");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const size_t ws = workspace_.bytes();
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
           "preference workspace");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b,
                                                           p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0) ||
      (fp8 && outer && st == CUBLAS_STATUS_INVALID_VALUE)) {  // per-row scales refused: the caller unfuses
    refused_[key] = true;  // asked once
    return nullptr;
  }
  check_lt(st, "heuristic");
  p->algo = result.algo;
  (void)accumulate;
  if (autotune_ && M <= kAutotuneMaxRows) {
    // 16-bit outputs: split-K partials only in f32 (see the header).
    const bool f32_partials = out_dt != DType::F32;
    p->candidates = {p->algo};
    for (const cublasLtMatmulAlgo_t& a : lt_candidates(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c,
                                                       ws, f32_partials, kAutotuneCandidates))
      if (!lt_same_algo(a, p->algo)) p->candidates.push_back(a);
    // Split-K forms of the first unsplit ones (the heuristic offers few for skinny products).
    const std::vector<cublasLtMatmulAlgo_t> first(p->candidates.begin(),
                                                  p->candidates.begin() + std::min<size_t>(8, p->candidates.size()));
    for (const cublasLtMatmulAlgo_t& a : lt_split_variants(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b,
                                                           p->c, first, ws, f32_partials, kAutotuneSplitVariants))
      if (std::none_of(p->candidates.begin(), p->candidates.end(),
                       [&](const cublasLtMatmulAlgo_t& c) { return lt_same_algo(a, c); }))
        p->candidates.push_back(a);
    p->tuned = p->candidates.size() < 2;
    if (p->tuned) ++stats_.single;
  }
  return plans_.emplace(key, std::move(p)).first->second.get();
}

void CublasLtGemm::linear(const void* x, const void* w, DType in_dt, const void* bias, void* y, DType out_dt,
                          float beta, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  if (M == 0) return;
  Plan& p = plan(Key{M, N, K, static_cast<int>(in_dt), static_cast<int>(out_dt), bias != nullptr, beta != 0.0f, false});
  if (bias)
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  const float alpha = 1.0f;
  auto run = [&](const void* algo, void* out) {
    return static_cast<int>(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &beta,
                                           out, p.c, out, p.c, static_cast<const cublasLtMatmulAlgo_t*>(algo),
                                           workspace_.get(), workspace_.bytes(), s));
  };
  tune(p, Key{M, N, K, static_cast<int>(in_dt), static_cast<int>(out_dt), bias != nullptr, beta != 0.0f, false}, s,
       run);
  check_lt(static_cast<cublasStatus_t>(run(&p.algo, y)), "matmul");
}

void CublasLtGemm::tune(Plan& p, const Key& key, cudaStream_t s, const RunAlgo& run) {
  if (p.tuned) return;
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  const auto [M, N, K, in_i, out_i, has_bias, accumulate, outer] = key;
  // The process cache's key: M's bucket (the power of two >= M), so that steps of 17..32 rows share
  // one tuning; a cached algorithm is taken where cublasLtMatmulAlgoCheck accepts it for this M.
  int64_t bucket = 1;
  while (bucket < M) bucket *= 2;
  const std::string ck = fmt::format("{} {}x{}x{} {}->{} bias {} acc {} outer {}", dev, bucket, N, K, in_i, out_i,
                                     has_bias, accumulate, outer);
  if (std::optional<cublasLtMatmulAlgo_t> a = lt_cached_algo(ck)) {
    cublasLtMatmulHeuristicResult_t res{};
    if (cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(handle_), p.op, p.a, p.b, p.c, p.c, &*a, &res) ==
            CUBLAS_STATUS_SUCCESS &&
        res.workspaceSize <= workspace_.bytes()) {
      p.algo = *a;
      p.tuned = true;
      p.candidates.clear();
      ++stats_.cached;
      return;
    }
  }
  if (lt_stream_capturing(s)) {  // never time inside a capture: the heuristic's first runs, tuned later
    ++stats_.deferred;
    VLM_LOG_DEBUG("cuBLASLt autotune {}: deferred (stream capturing)", ck);
    return;
  }
  p.tuned = true;
  const DType out_dt = static_cast<DType>(out_i);
  const auto t0 = std::chrono::steady_clock::now();
  const LtTuneResult r = lt_autotune(
      p.candidates,
      [&](const cublasLtMatmulAlgo_t& a, void* out) { return static_cast<cublasStatus_t>(run(&a, out)); }, M * N,
      out_dt, s);
  if (r.baseline_ok) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    VLM_LOG_DEBUG("cuBLASLt autotune {}: {} candidates, {} valid, tuned in {:.1f} ms; heuristic-first {:.2f} us ({}); "
                  "chosen #{} {:.2f} us ({})",
                  ck, p.candidates.size(), r.valid, ms, r.baseline_us, lt_algo_summary(p.candidates[0]), r.chosen,
                  r.chosen_us, lt_algo_summary(p.candidates[r.chosen]));
    p.algo = p.candidates[r.chosen];
    lt_cache_algo(ck, p.algo);
    ++stats_.tuned;
    if (r.chosen != 0) ++stats_.changed;
  }
  p.candidates.clear();
  p.candidates.shrink_to_fit();
}

int CublasLtGemm::run_fp8(Plan& p, const void* algo, const void* xq, const float* x_scale, const void* wq, const float* w_scale,
                          const void* bias, void* y, float beta, cudaStream_t s) {
  if (bias)
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "bias pointer");
  check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)),
           "A scale pointer");
  check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof(x_scale)),
           "B scale pointer");
  const float alpha = 1.0f;
  return static_cast<int>(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, wq, p.a, xq, p.b, &beta,
                                         y, p.c, y, p.c, static_cast<const cublasLtMatmulAlgo_t*>(algo),
                                         workspace_.get(), workspace_.bytes(), s));
}

bool CublasLtGemm::linear_fp8(const void* xq, const float* x_scale, const void* wq, const float* w_scale,
                              const void* bias, void* y, DType out_dt, float beta, int64_t M, int64_t N, int64_t K,
                              cudaStream_t s, float* tmp) {
  if (M == 0) return true;
  if (K % 16 != 0) precondition_failed("linear_fp8: K % 16 == 0");
  if (out_dt != DType::BF16 && out_dt != DType::F32) precondition_failed("linear_fp8: BF16 or F32 output");
  const int f8 = static_cast<int>(DType::F8_E4M3), out = static_cast<int>(out_dt), f32 = static_cast<int>(DType::F32);
  // Tries one plan; false where cuBLASLt refuses it (remembered), the product enqueued otherwise.
  // run(plan, algo, out): the product with that algorithm into out (y or tmp); tuned first.
  auto attempt = [&](const Key& key, void* target, auto&& run) {
    Plan* p = try_plan(key);
    if (p == nullptr) return false;
    tune(*p, key, s, [&](const void* algo, void* out) { return run(*p, algo, out); });
    const int st = run(*p, &p->algo, target);
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
      check_lt(static_cast<cublasStatus_t>(st), "matmul fp8");
    plans_.erase(key);
    refused_[key] = true;
    return false;
  };
  // 1. Fused: per-row scales, bias and the residual add in cuBLASLt's epilogue.
  if (attempt(Key{M, N, K, f8, out, bias != nullptr, beta != 0.0f, true}, y,
              [&](Plan& p, const void* algo, void* o) {
                return run_fp8(p, algo, xq, x_scale, wq, w_scale, bias, o, beta, s);
              }))
    return true;
  if (tmp == nullptr) return false;
  // 2. Per-row scales into tmp, bias and residual after.
  if (attempt(Key{M, N, K, f8, f32, false, false, true}, tmp, [&](Plan& p, const void* algo, void* o) {
        return run_fp8(p, algo, xq, x_scale, wq, w_scale, nullptr, o, 0.0f, s);
      })) {
    fp8_scale_epilogue(y, out_dt, tmp, nullptr, nullptr, bias, beta != 0.0f, M, N, s);
    return true;
  }
  // 3. No scale modes: the raw FP8 product into tmp, both scales, bias and residual after.
  const Key plain_key{M, N, K, f8, f32, false, false, false};
  Plan& plain = plan(plain_key);
  tune(plain, plain_key, s,
       [&](const void* algo, void* o) { return run_fp8_unscaled(plain, algo, xq, wq, static_cast<float*>(o), s); });
  check_lt(static_cast<cublasStatus_t>(run_fp8_unscaled(plain, &plain.algo, xq, wq, tmp, s)), "matmul fp8 (unscaled)");
  fp8_scale_epilogue(y, out_dt, tmp, x_scale, w_scale, bias, beta != 0.0f, M, N, s);
  return true;
}

int CublasLtGemm::run_fp8_unscaled(Plan& p, const void* algo, const void* xq, const void* wq, float* tmp,
                                   cudaStream_t s) {
  const float alpha = 1.0f, beta = 0.0f;
  return static_cast<int>(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, wq, p.a, xq, p.b, &beta,
                                         tmp, p.c, tmp, p.c, static_cast<const cublasLtMatmulAlgo_t*>(algo),
                                         workspace_.get(), workspace_.bytes(), s));
}

}  // namespace vlm::cuda

