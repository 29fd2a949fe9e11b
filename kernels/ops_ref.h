// Naive references of kernels/ops.h: plain loops with double accumulation.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace vlm {

void rms_norm_ref(const float* x, const TensorView& w, float eps, int64_t T, float* y);
void silu_mul_ref(const float* gate, const float* up, int64_t T, int64_t I, float* out);
void softmax_rows_ref(float* x, int64_t rows, int64_t n);

}  // namespace vlm
