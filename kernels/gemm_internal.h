// The two paths behind linear() (kernels/gemm.h), exposed for tests and benchmarks; model code
// calls linear(). Same preconditions as linear(), checked there, not here.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace vlm::gemm_detail {

// Rows of x handled together by one pass of the small-M kernel over a block of W (larger M runs
// several passes over each L2-resident block): the default and the largest supported.
constexpr int64_t kDefaultRowGroup = 4;
constexpr int64_t kMaxRowGroup = 8;

// Streaming kernel: reads every weight row once from memory (converting 16-bit W to f32 in
// registers) for groups of up to kMaxRowGroup rows of x (an L2-sized block of W rows serves all
// groups before the next block); parallel over N. row_group = 0 picks kDefaultRowGroup.
// AVX-512 when use_avx512(), portable code otherwise. Any M >= 1, K >= 1.
void linear_small_m(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                    const float* bias /*[N] or null*/, float* y /*[M,N]*/, int64_t row_group = 0);

// OpenBLAS sgemm over N-panels of W, one panel per pool task. A 16-bit panel is first converted
// into a thread-local f32 buffer of panel_rows * K floats (<= 256 rows, ~4 MB); panel_rows = 0
// picks the size from N, K, the dtype and the thread count. F32 W is never copied. Any M, K >= 1.
void linear_blas(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                 const float* bias /*[N] or null*/, float* y /*[M,N]*/, int64_t panel_rows = 0);

}  // namespace vlm::gemm_detail
