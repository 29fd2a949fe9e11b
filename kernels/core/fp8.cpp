#include "kernels/core/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace vlm {

float fp8_e4m3_to_f32(uint8_t v) {
  const int e = (v >> 3) & 0xf, m = v & 7;
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  if (e == 0xf && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);  // subnormal: m * 2^-9
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
}

namespace {

// Round half to even of a non-negative value below 2^23 (independent of the FP rounding mode).
float round_half_even(float x) {
  const float f = std::floor(x), r = x - f;
  if (r > 0.5f) return f + 1.0f;
  if (r < 0.5f) return f;
  return std::fmod(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

}  // namespace

uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return sign | 0x7e;
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(round_half_even(a * 512.0f));  // 8 -> 0x08 = 2^-6
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): a = 1.m * 2^(e-1)
  int biased = e - 1 + 7;
  int m = static_cast<int>(round_half_even((std::ldexp(a, 1 - e) - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++biased;
  }
  if (biased > 15 || (biased == 15 && m == 7)) return sign | 0x7e;  // not reached below 448
  return sign | static_cast<uint8_t>(biased << 3 | m);
}

void quantize_fp8_rows(const float* w, int64_t N, int64_t K, uint8_t* q, float* scale) {
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
    const float inv = amax > 0.0f ? kFp8E4M3Max / amax : 1.0f;
    scale[n] = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
    for (int64_t k = 0; k < K; ++k) q[n * K + k] = f32_to_fp8_e4m3(row[k] * inv);
  }
}

void dequantize_fp8_rows(const uint8_t* q, const float* scale, int64_t N, int64_t K, float* out) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) out[n * K + k] = fp8_e4m3_to_f32(q[n * K + k]) * scale[n];
}

void dequantize_fp8_blocks(const uint8_t* q, const float* s, int64_t bn, int64_t bk, int64_t N, int64_t K, float* out) {
  const int64_t KB = (K + bk - 1) / bk;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) out[n * K + k] = fp8_e4m3_to_f32(q[n * K + k]) * s[(n / bn) * KB + k / bk];
}

}  // namespace vlm
