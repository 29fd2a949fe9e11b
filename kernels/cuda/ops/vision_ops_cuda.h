// Row kernels of the vision towers on the GPU (CLIP / SigLIP, the Qwen2-VL ViT, the LLaVA
// projector), each the GPU twin of a CPU kernel (kernels/ops/vision_ops.h, the patch unfold and
// rotary of model/vision) and tested against it (tests/kernels/cuda/test_cuda_vision_ops.cpp).
// Same contract as ops_cuda.h: device pointers, work enqueued on `s` (no host sync), launch
// checked; "dt" arrays are F32, BF16 or F16; arithmetic in f32; results rounded to dt once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

enum class Activation { QuickGelu, GeluErf, GeluTanh };

// out[t, :] = (x[t, :] - mean) / sqrt(var + eps) * w + b (biased variance, torch nn.LayerNorm),
// x [T, C] f32, w, b [C] f32, out [T, C] dt. out may alias x (dt F32).
void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t T, int64_t C, void* out, DType dt,
                cudaStream_t s);

// In place over n elements of dt: quick_gelu x*sigmoid(1.702x), GELU (erf) or GELU (tanh),
// the formulas of kernels/ops/vision_ops.h.
void activation(void* x, DType dt, int64_t n, Activation act, cudaStream_t s);

// dst[r * dst_stride + dst_col + i] = src[idx[r] * C + i] for r < R, i < C (idx null: r),
// converted from src_dt to dst_dt. Gathers patch rows into window order, drops CLIP's class
// rows into the projector's input, scatters merged rows back to prompt order.
void gather_rows(const void* src, DType src_dt, const int32_t* idx, int64_t R, int64_t C, void* dst, DType dst_dt,
                 int64_t dst_stride, int64_t dst_col, cudaStream_t s);

// The stride-p patch conv's unfold: pixels [N, 3, S, S] f32 -> patches [N * G * G, 3 * p * p] dt
// (G = S / p), row (n, gy, gx) holding [ch, ky, kx] (the conv weight's layout).
void unfold_patches(const float* pixels, int64_t N, int64_t S, int64_t p, void* patches, DType dt, cudaStream_t s);

// CLIP / SigLIP embeddings: x[n * L + t] = (t < cls ? class_emb : pe[n * P + t - cls] + patch_bias)
// + pos[t], cls = L - P (1 with a class token, else 0); pe [N * P, C], pos [L, C], x [N * L, C]
// f32; class_emb, patch_bias [C] f32 or null.
void clip_embed(const float* pe, const float* class_emb, const float* patch_bias, const float* pos, int64_t N,
                int64_t P, int64_t L, int64_t C, float* x, cudaStream_t s);

// The Qwen2-VL 2-D rotary table: table[t, i] = cos, table[t, D/2 + i] = sin of
// f32(pos_hw[t, i < D/4 ? 0 : 1]) * inv_freq[i % (D/4)] (cos/sin in double, rounded to f32);
// pos_hw [T, 2] (patch row, column), inv_freq [D/4], table [T, D] f32.
void vision_rope_table(const int32_t* pos_hw, const float* inv_freq, int64_t T, int64_t D, float* table,
                       cudaStream_t s);

// Rotates, in place, the q and k parts of a fused projection qkv [T, 3, H, D] (dt) as
// RotaryEmbedding::apply_cached does over all D dims (halves x1 | x2: x1 c - x2 s, x2 c + x1 s,
// products rounded before the sum); table [T, D] from vision_rope_table.
void vision_rope_qk(void* qkv, DType dt, int64_t T, int64_t H, int64_t D, const float* table, cudaStream_t s);

}  // namespace vlm::cuda
