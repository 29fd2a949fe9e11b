// Row ops of the vision towers (CLIP, SigLIP) and the LLaVA projector. Activations are f32, row-major;
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

// In place: x = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  (torch GELU,
// approximate="tanh"; transformers' gelu_pytorch_tanh, SigLIP's activation).
void gelu_tanh(float* x, int64_t n);
void gelu_tanh_ref(float* x, int64_t n);

// torch.nn.functional.interpolate(mode="bilinear", align_corners=False) without a scale
// factor, over channels-last maps: source coordinate (dst + 0.5) * in / out - 0.5 clamped at 0,
// f32 weights as torch's CPU kernel computes them. in[H, W, C] -> out[oh, ow, C]; oh, ow >= 1.
// Straight loops (it serves LLaVA-OneVision's small feature maps): the reference itself.
void bilinear_resize(const float* in, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, float* out);

// In place: x = x * sigmoid(1.702 * x)  (CLIP's quick_gelu).
void quick_gelu(float* x, int64_t n);
void quick_gelu_ref(float* x, int64_t n);

}  // namespace vlm
