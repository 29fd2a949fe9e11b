#include "engine/compute_dtype.h"

#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"

namespace vlm {

bool parse_compute_dtype(std::string_view s, ComputeDType* out) {
  if (s == "auto") {
    *out = ComputeDType::Auto;
    return true;
  }
  DType d;
  if (!parse_float_dtype_name(s, &d)) return false;
  *out = d == DType::BF16 ? ComputeDType::BFloat16 : d == DType::F16 ? ComputeDType::Float16 : ComputeDType::Float32;
  return true;
}

const char* compute_dtype_name(ComputeDType t) {
  switch (t) {
    case ComputeDType::Auto: return "auto";
    case ComputeDType::BFloat16: return "bfloat16";
    case ComputeDType::Float16: return "float16";
    case ComputeDType::Float32: return "float32";
  }
  return "?";
}

ComputeDType resolve_compute_dtype(ComputeDType asked, DType checkpoint_dtype) {
  if (asked != ComputeDType::Auto) return asked;
  switch (checkpoint_dtype) {
    case DType::BF16: return ComputeDType::BFloat16;
    case DType::F16: return ComputeDType::Float16;
    default: return ComputeDType::Float32;
  }
}

std::string apply_cpu_compute_dtype(ComputeDType resolved) {
  VLM_CHECK(resolved != ComputeDType::Auto, "apply_cpu_compute_dtype needs a resolved dtype");
  const bool bf16 = resolved == ComputeDType::BFloat16 && gemm_detail::bf16_dot_supported();
  set_bf16_activations(bf16);
  if (bf16)
    return "bfloat16: bf16 weights multiply bf16-rounded activations (AVX512-BF16), f32 sums";
  if (resolved == ComputeDType::BFloat16)
    return "bfloat16 asked, but this CPU has no AVX512-BF16: f32 activations (exact path)";
  if (resolved == ComputeDType::Float16)
    return "float16 has no CPU kernel: f32 activations (exact path)";
  return "float32: f32 activations (exact path)";
}

}  // namespace vlm
