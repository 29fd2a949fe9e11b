// What EngineConfig::dtype (vLLM's --dtype; nullopt = auto) means on the CPU. The flag is
// device-neutral: auto is the checkpoint's dtype, as vLLM and llama.cpp run a bf16 checkpoint in
// bf16; F32 is the exact path (the one the Hugging Face parity tests check to 1e-4). On the CPU
// (apply_cpu_dtype): BF16 runs bf16-rounded activations against bf16 weights with AVX512-BF16
// dot products (kernels/gemm/gemm.h, set_bf16_activations) where the CPU has them, and attention
// over a bf16 KV cache in bf16 dot products (kernels/attention/paged_attention.h,
// set_bf16_attention), f32 activations and f32 attention elsewhere; F16 has no CPU kernel and runs f32 activations.
#pragma once

#include <optional>
#include <string>

#include "kernels/core/dtype.h"

namespace vlm {

// nullopt (auto) -> the checkpoint's dtype; anything else as asked.
DType resolve_dtype(std::optional<DType> asked, DType checkpoint_dtype);

// Sets the process-wide bf16 switches of linear() and paged_attention() for a resolved dtype (on
// for BF16 where gemm_detail::bf16_dot_supported(), else off) and returns a sentence saying what runs,
// for the log. Not safe while kernels run.
std::string apply_cpu_dtype(DType resolved);

}  // namespace vlm
