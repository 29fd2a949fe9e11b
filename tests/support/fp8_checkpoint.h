// FP8 checkpoints made from a fixture model for the FP8 tests: every decoder linear weight
// ("model.layers.<i>.{self_attn,mlp}.<x>_proj.weight") quantized to E4M3 in one of the published
// layouts (model/decoder/weight_quantization.h), everything else copied as stored:
//  - Fp8Scales::Block: `<name>_scale_inv` [ceil(N/b), ceil(K/b)] BF16 (as the Qwen3 FP8 releases
//    store it), q = e4m3(w / s) per b x b block with s = bf16(amax / 448); config.json gets
//    quantization_config {quant_method fp8, fmt e4m3, activation_scheme dynamic,
//    weight_block_size [b, b]};
//  - Fp8Scales::Channel: `<name>_scale` [N, 1] F32 (kernels/core/fp8.h's quantize_fp8_rows);
//    config.json gets compressed-tensors' float-quantized channel/token config.
// With dequantized, the same weights are written as their exact f32 values instead (no
// quantization_config): the checkpoint an FP8 checkpoint must compute exactly like on the CPU.
#pragma once

#include <cstdint>
#include <string>

#include "model/decoder/weight_quantization.h"

namespace vlm::testing {

// Writes out_dir (created; config.json, generation_config.json and model.safetensors) from the
// checkpoint in src_dir; returns out_dir.
std::string write_fp8_checkpoint(const std::string& src_dir, const std::string& out_dir, Fp8Scales scales,
                                 int64_t block = 128, bool dequantized = false);

// The fraction of rows of ours [rows, V] whose argmax is ref's argmax.
double top1_agreement(const float* ours, const float* ref, int64_t rows, int64_t V);

}  // namespace vlm::testing
