// ComputeDType: the dtype the model's activations take in its matrix products (vLLM's --dtype),
// device-neutral: the CPU and GPU back ends each map it onto what they run.
//  - Auto (the default of EngineConfig and of the tools): the checkpoint's dtype, as vLLM and
//    llama.cpp run a bf16 checkpoint in bf16;
//  - Float32: the exact path (activations stay f32; 16-bit weights are widened to f32 in the
//    product), the one the Hugging Face parity tests check to 1e-4;
//  - BFloat16 / Float16: 16-bit activations.
// On the CPU (apply_cpu_compute_dtype): BFloat16 runs bf16-rounded activations against bf16
// weights with AVX512-BF16 dot products (kernels/gemm/gemm.h, set_bf16_activations) where the CPU
// has them, f32 activations elsewhere; Float16 has no CPU kernel and runs f32 activations.
#pragma once

#include <string>
#include <string_view>

#include "kernels/core/dtype.h"

namespace vlm {

enum class ComputeDType { Auto, BFloat16, Float16, Float32 };

// "auto"; "bfloat16"/"bf16"; "float16"/"half"/"f16"/"fp16"; "float32"/"float"/"f32"/"fp32".
bool parse_compute_dtype(std::string_view name, ComputeDType* out);
const char* compute_dtype_name(ComputeDType t);  // "auto", "bfloat16", "float16", "float32"

// Auto -> the dtype of the checkpoint's weights (F32 -> Float32, BF16 -> BFloat16, F16 ->
// Float16); anything else is returned as asked. Never returns Auto.
ComputeDType resolve_compute_dtype(ComputeDType asked, DType checkpoint_dtype);

// What the CPU kernels run for a resolved dtype: sets the process-wide bf16-activation switch
// of linear() (on for BFloat16 where gemm_detail::bf16_dot_supported(), else off) and returns
// a sentence saying what runs, for the log. Not safe while kernels run.
std::string apply_cpu_compute_dtype(ComputeDType resolved);

}  // namespace vlm
