#include "kernels/core/dtype.h"

#include "kernels/core/x86_intrinsics.h"

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"

namespace vlm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: case DType::F8_E4M3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::F32}, {"BF16", DType::BF16}, {"F16", DType::F16}, {"F64", DType::F64},
      {"I64", DType::I64}, {"I32", DType::I32},   {"I16", DType::I16}, {"I8", DType::I8},
      {"U8", DType::U8},   {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3}};
  for (const auto& [name, t] : kNames)
    if (s == name) { *out = t; return true; }
  return false;
}

bool parse_float_dtype_name(std::string_view s, DType* out) {
  if (s == "float32" || s == "f32" || s == "fp32" || s == "float") { *out = DType::F32; return true; }
  if (s == "bfloat16" || s == "bf16") { *out = DType::BF16; return true; }
  if (s == "float16" || s == "f16" || s == "fp16" || s == "half") { *out = DType::F16; return true; }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    // inf, or NaN: quieted, payload kept (as F16C vcvtph2ps and GCC's _Float16 do)
    bits = sign | 0x7f800000u | (man << 13) | (man != 0 ? 0x400000u : 0u);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u)  // NaN: quieted, top payload bits kept (as F16C vcvtps2ph does)
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero (|f| < 2^-14)
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t exp = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    // value = man * 2^(exp-150); in units of the smallest subnormal 2^-24 that is
    // man * 2^(exp-126), i.e. man >> shift with shift = 126 - exp in [14, 24].
    uint32_t shift = 126 - exp;
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits to nearest even
  uint32_t v = abs - 0x38000000u;  // (exp - 112) << 23
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<uint16_t>(sign | (v >> 13));
}

namespace {

// ---- AVX-512 bulk conversions: bit-identical to the scalar functions above ----------------
// Full 16-lane blocks, then one masked block for the n % 16 tail.

inline __mmask16 tail_mask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

VLM_TARGET_AVX512 void bf16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}

// Same rounding as f32_to_bf16: bits + 0x7fff + lsb (nearest even); NaN -> (bits >> 16) | 0x40.
VLM_TARGET_AVX512 inline __m512i f32_to_bf16_lanes(__m512 v) {
  __m512i bits = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb);
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x400000));
  return _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet), 16);
}

VLM_TARGET_AVX512 void f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i r = f32_to_bf16_lanes(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, f32_to_bf16_lanes(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

VLM_TARGET_AVX512 void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i,
                     _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

VLM_TARGET_AVX512 void f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

}  // namespace

void convert_to_f32(const void* src, DType t, float* dst, int64_t n) {
  VLM_CHECK(n >= 0, "convert_to_f32 of {} elements", n);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      if (use_avx512()) return bf16_to_f32_avx512(s, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      if (use_avx512()) return f16_to_f32_avx512(s, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      VLM_CHECK(false, "convert_to_f32 from {}", dtype_name(t));
  }
}

void convert_from_f32(const float* src, DType t, void* dst, int64_t n) {
  VLM_CHECK(n >= 0, "convert_from_f32 of {} elements", n);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      if (use_avx512()) return f32_to_bf16_avx512(src, d, n);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      if (use_avx512()) return f32_to_f16_avx512(src, d, n);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      VLM_CHECK(false, "convert_from_f32 to {}", dtype_name(t));
  }
}

}  // namespace vlm
