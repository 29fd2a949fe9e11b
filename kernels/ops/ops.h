// Element-wise and row-wise operations of the decoder. All activations are f32, row-major.
// Weights (norm scales, embeddings) may be F32/BF16/F16 and are read in their stored dtype.
// Each op has a naive *_ref twin in ops_ref.h; tests compare them over tables of shapes.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.h"

namespace vlm {

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w  (HF LlamaRMSNorm: the normalization in
// f32, then the weight). y may alias x.
void rms_norm(const float* x /*[T,C]*/, const TensorView& w /*[C]*/, float eps, int64_t T,
              float* y /*[T,C]*/);

// out[t, i] = silu(gate[t, i]) * up[t, i]; silu(g) = g / (1 + exp(-g)). out may alias gate.
void silu_mul(const float* gate /*[T,I]*/, const float* up /*[T,I]*/, int64_t T, int64_t I,
              float* out /*[T,I]*/);

// In-place softmax over each row of x[rows, n] (max-subtracted).
void softmax_rows(float* x /*[rows,n]*/, int64_t rows, int64_t n);

// Maxima of consecutive blocks of one row, on the calling thread: out[b] = max of
// x[b*block, min(n, (b+1)*block)) for b < ceil(n / block); block >= 1; x holds no NaN (-inf is fine).
void block_max(const float* x /*[n]*/, int64_t n, int64_t block, float* out /*[ceil(n/block)]*/);

// Sum of e^(x[i] * s - m) over one row, on the calling thread, accumulated in double; each term in
// f32 (x[i] * s rounded, then the difference; relative error <= 1e-6 per term); y[i] gets the
// terms when y is not null (y may alias x). m finite, s > 0; -inf entries give 0. With
// s = 1 / temperature and m = max(x) * s: the unnormalized softmax of logits at that temperature.
double exp_sum(const float* x /*[n]*/, int64_t n, float s, float m, float* y /*[n] or null*/);

// y[i] += x[i] (residual add).
void add_inplace(float* y, const float* x, int64_t n);

// out[t, :] = float(table[ids[t], :]); ids are checked against the table's row count.
void embedding_lookup(const TensorView& table /*[V,C]*/, const int32_t* ids /*[T]*/, int64_t T,
                      float* out /*[T,C]*/);

}  // namespace vlm
