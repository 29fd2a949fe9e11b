// The decoder's configuration, parsed from a Hugging Face config.json.
// Both layouts are read: transformers >= 5 (`rope_parameters` holding rope_theta and rope_type)
// and the legacy one of released checkpoints (`rope_theta` + `rope_scaling`, with "type" or
// "rope_type"). Values are resolved the way transformers 5.17 resolves them (standardize_rope_params):
// a top-level original_max_position_embeddings wins, else the one in the rope dict, else
// max_position_embeddings; yarn without a factor uses max_position_embeddings / original.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/core/dtype.h"
#include "kernels/ops/rope.h"

namespace vlm {

enum class DecoderFamily { Llama, Qwen2, Qwen3 };

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"
  DecoderFamily family = DecoderFamily::Llama;
  int64_t vocab_size = 0;         // V
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // I
  int64_t num_layers = 0;
  int64_t num_heads = 0;     // H
  int64_t num_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;      // D
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2: always; Llama, Qwen3: attention_bias
  bool o_bias = false;    // Llama, Qwen3: attention_bias
  bool mlp_bias = false;  // Llama: mlp_bias
  bool qk_norm = false;   // Qwen3: per-head RMSNorm of q and k over head_dim before RoPE
                          // (self_attn.q_norm.weight / k_norm.weight [D], eps rms_norm_eps)
  // Qwen3-VL's DeepStack (set by Qwen3VLConfig, never by a text config.json): after decoder layer
  // i < deepstack_layers the media rows' hidden states get plane i + 1 of the embedding override
  // added (EmbeddingOverride::num_planes = 1 + deepstack_layers). 0: none.
  int64_t deepstack_layers = 0;
  RopeConfig rope;
  DType dtype = DType::BF16;  // stored weight dtype (torch_dtype / dtype), informational
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Parses config.json content; `source` names the file in error messages.
  // Throws LoadError for a missing or invalid field, an unsupported architecture, activation,
  // rope type, sliding-window attention (use_sliding_window, or a layer_types entry other than
  // full_attention), naming the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // Reads DIR/config.json. Throws LoadError naming the file when it cannot be read or parsed.
  static ModelConfig load(const std::string& model_dir);
};

}  // namespace vlm
