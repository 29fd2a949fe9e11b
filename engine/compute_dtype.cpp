#include "engine/compute_dtype.h"

#include "kernels/attention/paged_attention.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"

namespace vlm {

DType resolve_dtype(std::optional<DType> asked, DType checkpoint_dtype) { return asked ? *asked : checkpoint_dtype; }

std::string apply_cpu_dtype(DType resolved) {
  const bool bf16 = resolved == DType::BF16 && gemm_detail::bf16_dot_supported();
  set_bf16_activations(bf16);
  set_bf16_attention(bf16);
  if (bf16) return "bfloat16: bf16 weights multiply bf16-rounded activations, attention on a bf16 KV cache in bf16 dot products (AVX512-BF16), f32 sums";
  if (resolved == DType::BF16) return "bfloat16 asked, but this CPU has no AVX512-BF16: f32 activations (exact path)";
  if (resolved == DType::F16) return "float16 has no CPU kernel: f32 activations (exact path)";
  return "float32: f32 activations (exact path)";
}

}  // namespace vlm
