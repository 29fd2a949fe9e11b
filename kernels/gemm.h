// Matrix products for linear layers: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
// W keeps its stored dtype (F32, BF16 or F16, nn.Linear layout, row n = output feature n) and is
// converted to f32 per tile inside the product: a bf16 checkpoint is never expanded to a full
// f32 copy. x, y and bias are f32; accumulation is f32.
//
// Paths, chosen per call:
//  - small M (decode, M <= kSmallM): a bandwidth-bound kernel that streams each weight byte once
//    for all M rows (AVX-512 when the CPU has it, portable code otherwise);
//  - larger M: OpenBLAS sgemm on N-panels of W (converted to f32 panel by panel for 16-bit W),
//    the panels split over the global thread pool.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace vlm {

constexpr int64_t kSmallM = 4;

// Preconditions: W is 2-D [N, K] with dtype F32/BF16/F16; x has M*K floats, y has M*N floats;
// bias is null or has N floats; y does not alias x. M may be 0 (no-op).
void linear(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
            const float* bias /*[N] or null*/, float* y /*[M,N]*/);

// Naive reference: double accumulation, one output at a time.
void linear_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                const float* bias /*[N] or null*/, float* y /*[M,N]*/);

}  // namespace vlm
