// FP8 E4M3 ("fn": 4 exponent bits of bias 7, 3 mantissa bits, no infinities, 0x7f/0xff NaN,
// largest finite 448) and the FP8 weight formats' host math: the exact CPU references of the
// GPU's quantizers (kernels/cuda/gemm/fp8_quantize.h computes the same bits) and the
// dequantization of FP8 checkpoints on the CPU.
//  - Per-row quantization (a weight's output channel, an activation's token): scale = amax / 448
//    (1 for an all-zero row), q = e4m3(x * (448 / amax)) rounded to nearest even and saturated to
//    +-448; the value q represents is fp8_to_f32(q) * scale.
//  - 128x128 block scales (transformers' quant_method "fp8", weight_block_size [bn, bk], the tensor
//    `weight_scale_inv` [ceil(N/bn), ceil(K/bk)]): w[n, k] = fp8_to_f32(q[n, k]) * s[n / bn, k / bk].
#pragma once

#include <cstdint>

namespace vlm {

constexpr float kFp8E4M3Max = 448.0f;

float fp8_e4m3_to_f32(uint8_t v);  // exact
// Round to nearest even, saturating finite values beyond +-448 to +-448 (CUDA's __NV_SATFINITE);
// NaN -> 0x7f.
uint8_t f32_to_fp8_e4m3(float f);

// q [N, K] and scale [N] of w [N, K] (row-major f32), one scale per row as above.
void quantize_fp8_rows(const float* w, int64_t N, int64_t K, uint8_t* q, float* scale);

// out [N, K] f32 = fp8(q) * scale[n] (per-row scales).
void dequantize_fp8_rows(const uint8_t* q, const float* scale, int64_t N, int64_t K, float* out);

// out [N, K] f32 = fp8(q) * s[n / bn, k / bk], s [ceil(N/bn), ceil(K/bk)] f32 (block scales). Exact:
// an E4M3 value (4 significant bits) times an f32 scale of at most 24 significant bits fits f32
// unless the product leaves f32's exponent range (never for a checkpoint's scales).
void dequantize_fp8_blocks(const uint8_t* q, const float* s, int64_t bn, int64_t bk, int64_t N, int64_t K, float* out);

}  // namespace vlm
