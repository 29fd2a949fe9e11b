// Row kernels of the decoder on the GPU, each the GPU twin of a CPU kernel (kernels/ops) and
// tested against it (tests/kernels/cuda). All pointers are device pointers; every call only
// enqueues work on `stream` (no host sync) and checks the launch. `dt` names the element type
// of the activation/weight arrays marked "dt" (F32, BF16 or F16); the residual stream and norm
// weights are always f32. Arithmetic is f32 (sums of squares in f32 pairs of partial sums,
// see each kernel), results rounded to `dt` once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

// x[t, :] = float(table[ids[t], :]); table [V, C] dt, x [T, C] f32. Ids must be in [0, V)
// (the host checks them before the upload).
// embedding: launched with programmatic dependent launch inside an active PdlScope (kernels/cuda/core/pdl.h).
void embedding(const void* table, DType dt, const int32_t* ids, int64_t T, int64_t C, float* x, cudaStream_t s);

// out[r, :] = w * (x[row(r), :] * rsqrt(mean(x[row(r)]^2) + eps)) as dt, row(r) = rows ? rows[r]
// : r, for r in [0, R). x [*, C] f32, w [C] f32, out [R, C] dt. With `residual` (dt, [R, C]) the
// kernel first adds it into x's row in place (the fused residual add), then normalizes.
void rms_norm(float* x, const void* residual, const float* w, float eps, const int32_t* rows, int64_t R, int64_t C,
              void* out, DType dt, cudaStream_t s);

// out[t, i] = silu(gu[t, i]) * gu[t, I + i]; gu [T, 2I] dt (gate | up), out [T, I] dt.
void silu_mul(const void* gu, int64_t T, int64_t I, void* out, DType dt, cudaStream_t s);

// M-RoPE's frequency-to-axis map (RopeConfig::mrope_section / mrope_interleaved): contiguous,
// frequency i takes axis 0 for i < s0, 1 for i < s0 + s1, else 2; interleaved (Qwen3-VL), axis 1
// when i % 3 == 1 and i < 3 s1, axis 2 when i % 3 == 2 and i < 3 s2, else 0.
struct MropeAxes {
  int s0 = 0, s1 = 0, s2 = 0;
  bool interleaved = false;
};

// The RoPE cos/sin table of every token: table[t, 0:R/2] = cos, [R/2:R] = sin of
// f32(pos) * inv_freq[i] (cos/sin in double, rounded to f32), times `scaling`; R = 2 * half.
// With mrope_positions [T, 3] (else null: positions [T]), frequency i takes the position of axis
// a(i) of `axes` (RotaryEmbedding::mrope_axis).
void rope_table(const int32_t* positions, const int32_t* mrope_positions, const MropeAxes& axes, const float* inv_freq,
                int half, float scaling, int64_t T, float* table, cudaStream_t s);

// Qwen3's per-head q/k RMSNorm, in place on the fused projection qkv [T, (H + 2 Hkv) D] (dt; per
// row q heads, then k, then v): each q head x [D] becomes q_w * (x * rsqrt(mean(x^2) + eps)),
// each k head the same with k_w (q_w, k_w [D] f32), v untouched; f32 arithmetic, one rounding
// to dt (CpuNorm::apply on planes, the CPU layers' order).
void head_rms_norm(void* qkv, int64_t T, int64_t H, int64_t Hkv, int64_t D, const float* q_w, const float* k_w,
                   float eps, DType dt, cudaStream_t s);

// Splits the fused projection qkv [T, (H + 2 Hkv) D] (dt; per row q heads, then k, then v) into
// q [T, H, D], k [T, Hkv, D] and v [T, Hkv, D] (dt), rotating q and k as
// RotaryEmbedding::apply_cached does: for the first R dims of a head (halves x1 | x2),
// (x1 c - x2 s, x2 c + x1 s) with products rounded before the sum (no FMA); v is copied.
void rope_split_qkv(const void* qkv, int64_t T, int64_t H, int64_t Hkv, int64_t D, const float* table, int64_t R,
                    void* q, void* k, void* v, DType dt, cudaStream_t s);

}  // namespace vlm::cuda
