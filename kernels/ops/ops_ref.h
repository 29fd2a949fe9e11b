// Naive references of kernels/ops/ops.h: plain loops with double accumulation. Same contracts and
// argument checks as the fast ops; meant for tests, not for speed.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.h"

namespace vlm {

void rms_norm_ref(const float* x /*[T,C]*/, const TensorView& w /*[C]*/, float eps, int64_t T,
                  float* y /*[T,C]*/);
void silu_mul_ref(const float* gate /*[T,I]*/, const float* up /*[T,I]*/, int64_t T, int64_t I,
                  float* out /*[T,I]*/);
void softmax_rows_ref(float* x /*[rows,n]*/, int64_t rows, int64_t n);
void add_inplace_ref(float* y, const float* x, int64_t n);
void embedding_lookup_ref(const TensorView& table /*[V,C]*/, const int32_t* ids /*[T]*/,
                          int64_t T, float* out /*[T,C]*/);

}  // namespace vlm
