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

// The sparse mixture-of-experts layers of Qwen3-MoE (transformers 5.17 Qwen3MoeConfig) and of
// Qwen3-VL-MoE's decoder (Qwen3VLMoeTextConfig). Layer l is a MoE block iff num_experts > 0, l is
// not in mlp_only_layers and (l + 1) % decoder_sparse_step == 0 (Qwen3MoeDecoderLayer); other
// layers keep the dense gated MLP of intermediate_size.
struct MoeConfig {
  int64_t num_experts = 0;        // E (num_experts, or num_local_experts); 0: no MoE layer
  int64_t top_k = 0;              // num_experts_per_tok
  bool norm_topk_prob = false;    // renormalise the top-k weights (always, for Qwen3-VL-MoE)
  int64_t intermediate_size = 0;  // moe_intermediate_size: each expert's I
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // A fused gate_up_proj whose shape reads both ways (C == 2I): [E, C, 2I] (the released
  // Qwen3-VL-MoE layout) when true, else [E, 2I, C] (transformers 5's Qwen3MoeExperts).
  bool fused_transposed_when_ambiguous = false;
  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const;
};

struct ModelConfig {
  std::string architecture;  // "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"
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
  MoeConfig moe;  // Qwen3MoeForCausalLM (and Qwen3-VL-MoE's text_config); disabled otherwise
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
  // full_attention), naming the field. Qwen3MoeForCausalLM: a missing or non-positive
  // num_experts / num_experts_per_tok / moe_intermediate_size, top-k above the experts, a
  // decoder_sparse_step below 1, an mlp_only_layers entry outside the layers, and a MoE layout we
  // do not read: shared experts (shared_expert_intermediate_size, n_shared_experts,
  // num_shared_experts > 0), another gating (scoring_func other than softmax, topk_method,
  // n_group / topk_group > 1, routed_scaling_factor other than 1, router_type, moe_layer_freq,
  // first_k_dense_replace), each named.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  // Reads DIR/config.json. Throws LoadError naming the file when it cannot be read or parsed.
  static ModelConfig load(const std::string& model_dir);
};

}  // namespace vlm
