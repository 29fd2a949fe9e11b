// Matrix products for linear layers: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// W keeps its stored dtype (F32, BF16 or F16, nn.Linear layout, row n = output feature n) and is
// converted to f32 per tile inside the product: a bf16 checkpoint is never expanded to a full
// f32 copy. x, y and bias are f32; accumulation is f32.
//
// Paths, chosen per call:
//  - small M (decode and small batches; M <= small_m_limit(W.dtype)): a kernel that reads each
//    weight byte from memory once for all M rows (AVX-512 when the CPU has it, portable code
//    otherwise);
//  - M >= kBf16DotMinM, BF16 W, CPU with AVX512-BF16, and bf16 activations switched on
//    (set_bf16_activations; off by default): x is rounded to bf16 once and a blocked vdpbf16ps
//    kernel sums the products in f32 (kernels/gemm/gemm_bf16.cpp), ~3x the OpenBLAS f32 path. This
//    is what a bf16 checkpoint runs in PyTorch (bf16 inputs, f32 accumulation), but it is an
//    approximation of the f32 compute the HF-equality fixtures (bf16 weights, f32 reference)
//    check, and results then depend on how many rows share a call (batch composition);
//  - M < kBf16DotMinM with the same conditions: a GEMV kernel (kernels/gemm/gemv_bf16.cpp) that
//    rounds x to bf16 the same way and streams W's stored rows through vdpbf16ps (decode);
//  - otherwise, larger M: OpenBLAS sgemm on N-panels of W (converted to f32 panel by panel for
//    16-bit W), the panels split over the global thread pool.
// Default for every W dtype: f32 activations (exact up to f32 summation order). F32 and F16 W
// never round x.
// Both run on the global thread pool (kernels/core/thread_pool.h); OpenBLAS itself runs 1 thread.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/core/tensor.h"

namespace vlm {

// Largest M that takes the small-M path. With AVX-512 that kernel beats the OpenBLAS path (even
// with OpenBLAS's AVX-512 kernels) up to about these M at 4096x4096 (bench/RESULTS.md, "GEMM");
// 16-bit W gains more since the OpenBLAS path must first convert W. The portable kernel only
// for decode sizes.
constexpr int64_t kSmallM = 32;          // F32 W, AVX-512
constexpr int64_t kSmallM16Bit = 128;    // BF16/F16 W, AVX-512
constexpr int64_t kSmallMPortable = 4;   // any W, no AVX-512
int64_t small_m_limit(DType w_dtype);   // the one of the above that applies on this CPU
// Smallest M that takes the bf16 dot-product path (BF16 W); below it the bf16 GEMV kernel runs,
// which beat the packed dot-product kernel up to M = 32 on the 4864 x 896 shape (bench_gemm_qwen
// crossover/*, bench/RESULTS.md "GEMV"), so 16-sequence decode stays on it.
constexpr int64_t kBf16DotMinM = 32;

// Process-wide switch for the bf16 dot-product path (default off: BF16 W runs with f32
// activations, small-M kernel or OpenBLAS, the exact path). Servers expose it as
// --gemm-activations bf16|f32. Not safe while kernels run.
void set_bf16_activations(bool enabled);
bool bf16_activations();
// Whether linear() runs the bf16 dot-product path for this W dtype and M on this CPU now.
bool uses_bf16_dot(DType w_dtype, int64_t M);
// Whether linear() runs the bf16 GEMV path (M < kBf16DotMinM, the same switch and CPU feature:
// x rounded to bf16, vdpbf16ps on W's stored rows; kernels/gemm/gemv_bf16.cpp) for this W dtype
// and M on this CPU now.
bool uses_bf16_gemv(DType w_dtype, int64_t M);

// Preconditions: W is 2-D [N, K] with dtype F32/BF16/F16; x has M*K floats, y has M*N floats;
// bias is null or has N floats; y does not alias x. M may be 0 (no-op).
void linear(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
            const float* bias /*[N] or null*/, float* y /*[M,N]*/);

// One product of linear_multi(): y[M, N] = x · W^T (+ bias), W [N, K] as for linear().
struct LinearTarget {
  const TensorView* W;   // [N, K]
  const float* bias;     // [N] or null
  float* y;              // [M, N]
};

// Several products of the same x (a layer's q/k/v, or gate/up) with the results of linear()
// for each: one pool hand-off and one conversion of x for all of them where they take the same
// path (same K and W dtype: the small-M and bf16 dot-product paths), else one linear() each.
// Preconditions: those of linear() for every target; no y overlaps x or another y.
void linear_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets);

// Naive reference: double accumulation, one output at a time.
void linear_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                const float* bias /*[N] or null*/, float* y /*[M,N]*/);

}  // namespace vlm
