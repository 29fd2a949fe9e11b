// Autotuning of cuBLASLt algorithms for decode-sized GEMMs (CublasLtGemm, M <= 64 rows): the
// heuristic's first answer (what CublasLtGemm runs without autotuning), up to 31 more of its
// candidates (other tiles, split-K, stages, swizzles) and split-K forms of its first unsplit ones,
// timed once on the real operands of the shape, the fastest valid one kept. Used by
// kernels/cuda/gemm/cublaslt_gemm.cpp only.
//  - lt_candidates: the heuristic's answers for one descriptor set, at most `max`, each needing no
//    more than workspace_bytes (CublasLtGemm's fixed workspace, so a chosen algorithm runs inside a
//    CUDA graph as the heuristic's first does). f32_partials: split-K only with partial sums kept in
//    f32 (CUBLASLT_REDUCTION_SCHEME_NONE | COMPUTE_TYPE; INPLACE and OUTPUT_TYPE add partials in the
//    output type, a bf16 rounding per split) - what a 16-bit output asks for.
//  - lt_autotune: candidate 0 is the baseline. Each candidate runs once into a scratch output
//    filled with ~3.0 (never into the caller's y: a residual add must not be applied twice; the
//    fill makes a residual add, beta = 1, count) and is compared with the baseline's output
//    (|a - b| <= 2^-6 |b| + 1e-3 max|b|: algorithms differ by accumulation order and one output
//    rounding, a broken one by far more); a valid one is then timed 7 times, each run after a
//    write of 2x the L2 (the weights come from HBM, as in a decode step), median kept. Another
//    candidate replaces the baseline only when >= 3 % faster (timing noise must not move the
//    numerics for nothing). Where the scratch output cannot be allocated nothing is tuned
//    (baseline_ok false); without room for the flush buffer the runs are timed unflushed.
//    Synchronizes `s`: never call it while a capture is in progress (lt_stream_capturing), nor with
//    other work on `s` whose timing matters.
//  - The process-wide cache: the chosen algorithm per (device, shape key), shared by every
//    CublasLtGemm of the process (the decoder's, the vision lanes', a benchmark's).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

std::vector<cublasLtMatmulAlgo_t> lt_candidates(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                                size_t workspace_bytes, bool f32_partials, int max);

// Split-K forms (2, 4, 8 splits) of the candidates in `base` that run unsplit and can split, at
// most `max`, each accepted by cublasLtMatmulAlgoCheck within workspace_bytes; partial sums in f32
// (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) or, for an f32 output (f32_partials false) whose
// algorithm has no such scheme, added in place in the output. Why: a product of few columns (o_proj,
// down_proj: N 3,584 = 28 tiles of 128) puts a fifth of an H200's SMs to work unsplit.
std::vector<cublasLtMatmulAlgo_t> lt_split_variants(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                                    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                                    const std::vector<cublasLtMatmulAlgo_t>& base,
                                                    size_t workspace_bytes, bool f32_partials, int max);

// One product with algorithm `algo` into `out` ([M, N] of the output type) on the tuning stream.
using LtRun = std::function<cublasStatus_t(const cublasLtMatmulAlgo_t& algo, void* out)>;

struct LtTuneResult {
  bool baseline_ok = false;  // candidate 0 ran (else nothing was chosen: chosen 0)
  int chosen = 0;            // index into the candidates
  int valid = 0;             // candidates that ran and matched the baseline (baseline included)
  double baseline_us = 0, chosen_us = 0;
};

LtTuneResult lt_autotune(const std::vector<cublasLtMatmulAlgo_t>& candidates, const LtRun& run, int64_t out_elems,
                         DType out_dt, cudaStream_t s);

bool lt_same_algo(const cublasLtMatmulAlgo_t& a, const cublasLtMatmulAlgo_t& b);  // bitwise

// True while `s` is capturing a graph (or its capture was invalidated).
bool lt_stream_capturing(cudaStream_t s);

// "algo 31 tile 20 splitK 4 reduction 2 swizzle 0 stages 12": an algorithm's configuration (logs).
std::string lt_algo_summary(const cublasLtMatmulAlgo_t& algo);

std::optional<cublasLtMatmulAlgo_t> lt_cached_algo(const std::string& key);
void lt_cache_algo(const std::string& key, const cublasLtMatmulAlgo_t& algo);

}  // namespace vlm::cuda
