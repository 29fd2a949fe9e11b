// Matrix products for linear layers: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// W keeps its stored dtype (F32, BF16 or F16, nn.Linear layout, row n = output feature n) and is
// converted to f32 per tile inside the product: a bf16 checkpoint is never expanded to a full
// f32 copy. x, y and bias are f32; accumulation is f32.
//
// Paths, chosen per call:
//  - small M (decode, M <= kSmallM with AVX-512, M <= kSmallMPortable without): a kernel that
//    reads each weight byte from memory once for all M rows (AVX-512 when the CPU has it,
//    portable code otherwise);
//  - larger M: OpenBLAS sgemm on N-panels of W (converted to f32 panel by panel for 16-bit W),
//    the panels split over the global thread pool.
// Both run on the global thread pool (kernels/thread_pool.h); OpenBLAS itself runs 1 thread.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace vlm {

// Largest M that takes the small-M path. With AVX-512 that kernel keeps up with OpenBLAS up to
// about M = 64 at 4096x4096 (bench/RESULTS.md, "GEMM"); the portable one only for decode sizes.
constexpr int64_t kSmallM = 64;
constexpr int64_t kSmallMPortable = 4;

// Preconditions: W is 2-D [N, K] with dtype F32/BF16/F16; x has M*K floats, y has M*N floats;
// bias is null or has N floats; y does not alias x. M may be 0 (no-op).
void linear(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
            const float* bias /*[N] or null*/, float* y /*[M,N]*/);

// Naive reference: double accumulation, one output at a time.
void linear_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                const float* bias /*[N] or null*/, float* y /*[M,N]*/);

}  // namespace vlm
