// The FP8 weight formats a checkpoint's config.json may declare (`quantization_config`), and the
// one tensor pair such a layer stores. We read two formats:
//  - transformers' `quant_method: "fp8"` (the Qwen3 / Qwen3-VL / DeepSeek FP8 releases): weights
//    F8_E4M3 [N, K] with `<name>_scale_inv` [ceil(N/bn), ceil(K/bk)] for weight_block_size
//    [bn, bk], activations dynamic; the value is q * scale_inv (kernels/core/fp8.h);
//  - compressed-tensors per-channel FP8 (`quant_method: "compressed-tensors"`, format
//    "float-quantized", weights {num_bits 8, type float, strategy channel}, input activations
//    none or dynamic per token): weights F8_E4M3 [N, K] with `<name>_scale` [N, 1] (or [N]).
// Anything else in quantization_config (AWQ, GPTQ, E5M2, per-tensor or static activation scales,
// other strategies) is refused with a LoadError that names the file and the setting.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/core/tensor.h"

namespace vlm {

enum class Fp8Scales { None, Block, Channel };

struct WeightQuantization {
  Fp8Scales scales = Fp8Scales::None;  // None: the checkpoint has no quantization_config
  int64_t block_n = 0, block_k = 0;    // Block: weight_block_size
  std::string scale_suffix;            // appended to a weight's name: "_scale_inv" or "_scale"
  std::string describe() const;        // "fp8 (128x128 block scales)", "compressed-tensors fp8 (per channel)"
};

// config's quantization_config (absent: scales None). Throws LoadError "PATH: quantization_config
// ..." naming what we do not read.
WeightQuantization parse_weight_quantization(const nlohmann::json& config, const std::string& path);
// model_dir/config.json's (no config.json: none).
WeightQuantization load_weight_quantization(const std::string& model_dir);

// One FP8 weight of a checkpoint: q [N, K] F8_E4M3 (a view into the checkpoint) and its scales in
// f32: [N] (Channel) or [ceil(N/bn), ceil(K/bk)] (Block).
struct Fp8Weight {
  TensorView q;
  Tensor scale;
  Fp8Scales scales = Fp8Scales::None;
  int64_t block_n = 0, block_k = 0;
};

}  // namespace vlm
