// Element types and conversions. bf16 and f16 are stored as raw 16-bit patterns; arithmetic is
// always done in f32. Scalar conversions round to nearest even (as PyTorch does); the bulk
// conversions give identical results and use AVX-512 when the CPU has it (checked at run time).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace vlm {

// F8_E4M3: FP8 E4M3 ("fn": no infinities, max 448), as safetensors and torch.float8_e4m3fn store it
// (kernels/core/fp8.h converts it; only FP8 checkpoints' weights and the GPU's FP8 linear layers use it).
enum class DType : uint8_t { F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
// Parses a safetensors dtype string; returns false for an unknown one.
bool parse_dtype(std::string_view s, DType* out);
// Parses a user-facing name: "float32"/"f32", "bfloat16"/"bf16", "float16"/"f16"/"half".
bool parse_float_dtype_name(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// dst[i] = float(src[i]) for n elements of type `t` (F32, BF16 or F16).
void convert_to_f32(const void* src, DType t, float* dst, int64_t n);
// dst[i] = t(src[i]) rounded to nearest even, for t in F32, BF16, F16.
void convert_from_f32(const float* src, DType t, void* dst, int64_t n);

// Scalar element load of a float-like tensor element; for reference code and tests.
inline float load_as_f32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return 0.0f;  // callers check the dtype first
  }
}

}  // namespace vlm
