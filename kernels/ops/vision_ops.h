// Row ops of the vision tower (CLIP) and the LLaVA projector. Activations are f32, row-major;
// weights (LayerNorm scale and bias) may be F32/BF16/F16. Each op has a naive *_ref twin (double
// accumulation) declared here too; tests compare them over tables of shapes.
#pragma once

#include <cstdint>

#include "kernels/core/tensor.h"

namespace vlm {

// y[t, :] = (x[t, :] - mean) / sqrt(var + eps) * w + b, with the biased variance (torch
// nn.LayerNorm). y may alias x.
void layer_norm(const float* x /*[T,C]*/, const TensorView& w /*[C]*/, const TensorView& b /*[C]*/,
                float eps, int64_t T, float* y /*[T,C]*/);
void layer_norm_ref(const float* x /*[T,C]*/, const TensorView& w /*[C]*/, const TensorView& b /*[C]*/,
                    float eps, int64_t T, float* y /*[T,C]*/);

// In place: x = x * 0.5 * (1 + erf(x / sqrt(2)))  (torch GELU, approximate="none").
void gelu_erf(float* x, int64_t n);
void gelu_erf_ref(float* x, int64_t n);

// In place: x = x * sigmoid(1.702 * x)  (CLIP's quick_gelu).
void quick_gelu(float* x, int64_t n);
void quick_gelu_ref(float* x, int64_t n);

}  // namespace vlm
