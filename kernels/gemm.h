// Matrix products for linear layers: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// W keeps its stored dtype (F32, BF16 or F16, nn.Linear layout, row n = output feature n) and is
// converted to f32 per tile inside the product: a bf16 checkpoint is never expanded to a full
// f32 copy. x, y and bias are f32; accumulation is f32.
//
// Paths, chosen per call:
//  - small M (decode and small batches; M <= small_m_limit(W.dtype)): a kernel that reads each
//    weight byte from memory once for all M rows (AVX-512 when the CPU has it, portable code
//    otherwise);
//  - larger M: OpenBLAS sgemm on N-panels of W (converted to f32 panel by panel for 16-bit W),
//    the panels split over the global thread pool.
// Both run on the global thread pool (kernels/thread_pool.h); OpenBLAS itself runs 1 thread.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace vlm {

// Largest M that takes the small-M path. With AVX-512 that kernel beats the OpenBLAS path (even
// with OpenBLAS's AVX-512 kernels) up to about these M at 4096x4096 (bench/RESULTS.md, "GEMM");
// 16-bit W gains more since the OpenBLAS path must first convert W. The portable kernel only
// for decode sizes.
constexpr int64_t kSmallM = 32;          // F32 W, AVX-512
constexpr int64_t kSmallM16Bit = 128;    // BF16/F16 W, AVX-512
constexpr int64_t kSmallMPortable = 4;   // any W, no AVX-512
int64_t small_m_limit(DType w_dtype);   // the one of the above that applies on this CPU

// Preconditions: W is 2-D [N, K] with dtype F32/BF16/F16; x has M*K floats, y has M*N floats;
// bias is null or has N floats; y does not alias x. M may be 0 (no-op).
void linear(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
            const float* bias /*[N] or null*/, float* y /*[M,N]*/);

// Naive reference: double accumulation, one output at a time.
void linear_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                const float* bias /*[N] or null*/, float* y /*[M,N]*/);

}  // namespace vlm
