// Qwen3-VL's configuration (transformers 5.17 Qwen3VLConfig: Qwen3VLTextConfig in text_config,
// Qwen3VLVisionConfig in vision_config), read from a checkpoint's config.json.
//
// Text: a Qwen3 decoder (per-head q/k RMSNorm, attention_bias for q/k/v/o) whose rope is
// interleaved M-RoPE (RopeConfig::mrope_interleaved). transformers' Qwen3VLTextRotaryEmbedding
// interleaves whatever `mrope_interleaved` says and defaults mrope_section to [24, 20, 20] and
// rope_theta to 500000; so do we. The rope dict is rope_parameters (5.x) or rope_scaling with a
// top-level rope_theta (the released checkpoints, written by 4.57).
// Vision: the Qwen3-VL tower (model/arch/qwen3_vl_vision_tower.h): Conv3d patch embed with bias,
// a learned num_position_embeddings = N * N position table interpolated to each grid, 2-D rope,
// LayerNorm blocks with a gelu_pytorch_tanh MLP, a 2x2 merger to out_hidden_size and one
// DeepStack merger per deepstack_visual_indexes entry (their outputs are added to the decoder's
// media rows after decoder layers 0 .. K-1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/decoder/model_config.h"

namespace vlm {

struct Qwen3VLVisionConfig {  // defaults: transformers 5.17 Qwen3VLVisionConfig
  int64_t depth = 27;
  int64_t hidden_size = 1152;        // Cv
  int64_t intermediate_size = 4304;  // Iv
  int64_t num_heads = 16;
  int64_t out_hidden_size = 3584;    // C, the mergers' output (must be the text hidden size)
  int64_t num_position_embeddings = 2304;  // N * N rows of the learned position table
  int patch_size = 16;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  std::vector<int> deepstack_visual_indexes = {8, 16, 24};  // blocks whose output feeds a DeepStack merger
  double norm_eps = 1e-6;      // every LayerNorm of the tower (fixed in transformers)
  double rope_theta = 10000.0;  // the 2-D vision rope (fixed in transformers)

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_dim() const { return 3LL * temporal_patch_size * patch_size * patch_size; }
  int64_t grid_side() const;  // N = sqrt(num_position_embeddings)
  int64_t num_deepstack() const { return static_cast<int64_t>(deepstack_visual_indexes.size()); }  // K

  // Throws LoadError naming `source` and the field: a non-numeric or non-positive size,
  // hidden_act other than gelu_pytorch_tanh, in_channels other than 3, hidden_size not split into
  // heads of a multiple of 4 dims, num_position_embeddings not a perfect square, a
  // deepstack_visual_indexes entry outside [0, depth) or repeated.
  static Qwen3VLVisionConfig from_json(const nlohmann::json& j, const std::string& source);
};

struct Qwen3VLConfig {
  // architecture Qwen3ForCausalLM (Qwen3MoeForCausalLM for the MoE one), qk_norm, rope.mrope_section
  // set, rope.mrope_interleaved
  ModelConfig text;
  Qwen3VLVisionConfig vision;
  int32_t image_token_id = 151655;
  int32_t video_token_id = 151656;
  int32_t vision_start_token_id = 151652;
  int32_t vision_end_token_id = 151653;

  // Qwen3VLMoeForConditionalGeneration (model_type qwen3_vl_moe) is read too: its text_config is
  // a Qwen3MoeConfig (text.moe; norm_topk_prob always true, as Qwen3VLMoeTextTopKRouter does;
  // fields left out take Qwen3VLMoeTextConfig's defaults: num_experts 60, num_experts_per_tok 4,
  // moe_intermediate_size 1408, intermediate_size 5632, decoder_sparse_step 1; layers in
  // mlp_only_layers or off the sparse step keep the dense MLP). A MoE layout we do not read
  // (shared experts, another gating) is refused naming the field (ModelConfig::from_json).
  // Throws LoadError naming `source` and the field: an architecture other than
  // Qwen3VLForConditionalGeneration (model_type qwen3_vl) or the MoE one, a missing text_config, anything
  // ModelConfig::from_json refuses in it (mrope_section not summing to head_dim / 2 among them),
  // the vision refusals, or a merger width unlike the text hidden size.
  static Qwen3VLConfig from_json(const nlohmann::json& j, const std::string& source);
  static Qwen3VLConfig load(const std::string& model_dir);  // DIR/config.json
};

}  // namespace vlm
