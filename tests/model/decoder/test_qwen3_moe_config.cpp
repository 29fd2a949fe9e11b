// ModelConfig's Qwen3MoeForCausalLM fields (transformers 5.17 Qwen3MoeConfig) and Qwen3VLConfig's
// Qwen3VLMoeForConditionalGeneration text_config: which layers are sparse, the fields' aliases,
// and the MoE layouts we do not read refused at load, naming the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/decoder/model_config.h"
#include "model/families/qwen3_vl_config.h"

namespace vlm {
namespace {

using nlohmann::json;

// Shaped like Qwen/Qwen3-30B-A3B's config.json (4.51 layout: rope_theta at the top): 48 layers,
// 128 experts of 768, top 8, renormalised.
json qwen3_30b_a3b() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
    "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936
  })");
}

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "cfg.json");
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

TEST(Qwen3MoeConfig, Qwen3_30B_A3B) {
  const ModelConfig c = ModelConfig::from_json(qwen3_30b_a3b(), "cfg.json");
  EXPECT_EQ(c.architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(c.family, DecoderFamily::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.moe.enabled());
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.top_k, 8);
  EXPECT_EQ(c.moe.intermediate_size, 768);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_FALSE(c.moe.fused_transposed_when_ambiguous);
  for (int64_t l = 0; l < 48; ++l) EXPECT_TRUE(c.moe.is_moe_layer(l)) << l;
}

TEST(Qwen3MoeConfig, DenseLayersAndTheSparseStep) {
  json j = qwen3_30b_a3b();
  j["mlp_only_layers"] = {0, 47};
  j["decoder_sparse_step"] = 2;
  const ModelConfig c = ModelConfig::from_json(j, "cfg.json");
  EXPECT_FALSE(c.moe.is_moe_layer(0));   // not (0 + 1) % 2
  EXPECT_TRUE(c.moe.is_moe_layer(1));
  EXPECT_FALSE(c.moe.is_moe_layer(46));
  EXPECT_FALSE(c.moe.is_moe_layer(47));  // listed dense
  j.erase("mlp_only_layers");            // transformers' default: none
  j.erase("decoder_sparse_step");        // default 1
  j.erase("norm_topk_prob");             // default false
  const ModelConfig d = ModelConfig::from_json(j, "cfg.json");
  EXPECT_TRUE(d.moe.is_moe_layer(0) && d.moe.is_moe_layer(47));
  EXPECT_FALSE(d.moe.norm_topk_prob);
  // num_local_experts: Qwen3MoeConfig's attribute_map name for num_experts.
  j.erase("num_experts");
  j["num_local_experts"] = 64;
  EXPECT_EQ(ModelConfig::from_json(j, "cfg.json").moe.num_experts, 64);
  // model_type alone names the architecture.
  j.erase("architectures");
  EXPECT_EQ(ModelConfig::from_json(j, "cfg.json").architecture, "Qwen3MoeForCausalLM");
  // Dense Qwen3 has no MoE.
  EXPECT_FALSE(ModelConfig::from_json(json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 10,
      "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
      "num_experts": 4})"), "cfg.json").moe.enabled());
}

TEST(Qwen3MoeConfig, LayoutsWeDoNotReadAreRefusedNamingTheField) {
  auto with = [](const char* key, json v) {
    json j = qwen3_30b_a3b();
    j[key] = std::move(v);
    return error_of(j);
  };
  EXPECT_NE(with("shared_expert_intermediate_size", 5632).find("shared_expert_intermediate_size = 5632: shared "
                                                               "experts"), std::string::npos);
  EXPECT_EQ(with("shared_expert_intermediate_size", 0), "");
  EXPECT_NE(with("n_shared_experts", 2).find("n_shared_experts = 2"), std::string::npos);
  EXPECT_NE(with("scoring_func", "sigmoid").find("scoring_func 'sigmoid'"), std::string::npos);
  EXPECT_NE(with("topk_method", "noaux_tc").find("topk_method = \"noaux_tc\""), std::string::npos);
  EXPECT_NE(with("n_group", 8).find("n_group = 8: group-limited"), std::string::npos);
  EXPECT_NE(with("routed_scaling_factor", 2.5).find("routed_scaling_factor = 2.5"), std::string::npos);
  EXPECT_NE(with("first_k_dense_replace", 3).find("first_k_dense_replace"), std::string::npos);
  EXPECT_NE(with("mlp_only_layers", {48}).find("mlp_only_layers entry 48 is not a layer index in [0, 48)"),
            std::string::npos);
  EXPECT_NE(with("num_experts_per_tok", 129).find("num_experts_per_tok 129 exceeds num_experts 128"),
            std::string::npos);
  EXPECT_NE(with("moe_intermediate_size", 0).find("moe_intermediate_size"), std::string::npos);
  json j = qwen3_30b_a3b();
  j.erase("num_experts");
  EXPECT_NE(error_of(j).find("num_local_experts"), std::string::npos) << error_of(j);
  EXPECT_NE(with("use_sliding_window", true).find("use_sliding_window"), std::string::npos);
}

// Shaped like Qwen/Qwen3-VL-30B-A3B-Instruct's config.json (4.57 layout): a Qwen3-MoE text_config
// (48 layers, 128 experts of 768, top 8) with interleaved M-RoPE, the Qwen3-VL tower.
json qwen3vl_30b_a3b() {
  return json::parse(R"({
    "architectures": ["Qwen3VLMoeForConditionalGeneration"], "image_token_id": 151655, "model_type": "qwen3_vl_moe",
    "text_config": {
      "attention_bias": false, "bos_token_id": 151643, "decoder_sparse_step": 1, "dtype": "bfloat16",
      "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
      "intermediate_size": 6144, "max_position_embeddings": 262144, "mlp_only_layers": [],
      "model_type": "qwen3_vl_moe_text", "moe_intermediate_size": 768, "num_attention_heads": 32,
      "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
      "rms_norm_eps": 1e-06,
      "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default"},
      "rope_theta": 5000000, "vocab_size": 151936
    },
    "tie_word_embeddings": false, "video_token_id": 151656,
    "vision_config": {
      "deepstack_visual_indexes": [8, 16, 24], "depth": 27, "hidden_act": "gelu_pytorch_tanh",
      "hidden_size": 1152, "in_channels": 3, "intermediate_size": 4304, "model_type": "qwen3_vl_moe",
      "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048, "patch_size": 16,
      "spatial_merge_size": 2, "temporal_patch_size": 2
    },
    "vision_end_token_id": 151653, "vision_start_token_id": 151652
  })");
}

TEST(Qwen3VLMoeConfig, TheTextConfigIsAQwen3MoeDecoderThatAlwaysRenormalises) {
  json j = qwen3vl_30b_a3b();
  const Qwen3VLConfig c = Qwen3VLConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.text.architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(c.text.qk_norm);
  EXPECT_TRUE(c.text.rope.mrope_interleaved);
  EXPECT_EQ(c.text.moe.num_experts, 128);
  EXPECT_EQ(c.text.moe.top_k, 8);
  EXPECT_EQ(c.text.moe.intermediate_size, 768);
  EXPECT_TRUE(c.text.moe.norm_topk_prob);  // Qwen3VLMoeTextTopKRouter always divides by the sum
  EXPECT_TRUE(c.text.moe.fused_transposed_when_ambiguous);
  EXPECT_EQ(c.vision.out_hidden_size, 2048);
  j["text_config"]["norm_topk_prob"] = false;  // not a field of Qwen3VLMoeTextConfig: ignored, as 5.17 does
  EXPECT_TRUE(Qwen3VLConfig::from_json(j, "cfg.json").text.moe.norm_topk_prob);
  j["text_config"]["shared_expert_intermediate_size"] = 1024;
  try {
    Qwen3VLConfig::from_json(j, "cfg.json");
    ADD_FAILURE() << "shared experts accepted";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json (text_config): shared_expert_intermediate_size = 1024"),
              std::string::npos)
        << e.what();
  }
  // The dense Qwen3-VL is not MoE.
  json d = qwen3vl_30b_a3b();
  d["architectures"] = {"Qwen3VLForConditionalGeneration"};
  d["model_type"] = "qwen3_vl";
  EXPECT_FALSE(Qwen3VLConfig::from_json(d, "cfg.json").text.moe.enabled());
}

// Fields a Qwen3-VL-MoE text_config leaves out take Qwen3VLMoeTextConfig's defaults (not
// Qwen3MoeConfig's); num_local_experts (its attribute_map name) is read; mlp_only_layers and
// decoder_sparse_step keep layers dense.
TEST(Qwen3VLMoeConfig, DefaultsAliasesAndDenseLayers) {
  json j = qwen3vl_30b_a3b();
  json& t = j["text_config"];
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "intermediate_size",
                          "decoder_sparse_step", "mlp_only_layers"})
    t.erase(key);
  Qwen3VLConfig c = Qwen3VLConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.text.moe.num_experts, 60);
  EXPECT_EQ(c.text.moe.top_k, 4);
  EXPECT_EQ(c.text.moe.intermediate_size, 1408);
  EXPECT_EQ(c.text.intermediate_size, 5632);
  EXPECT_EQ(c.text.moe.decoder_sparse_step, 1);
  for (int64_t l = 0; l < 48; ++l) EXPECT_TRUE(c.text.moe.is_moe_layer(l)) << l;
  t["num_local_experts"] = 16;
  t["num_experts_per_tok"] = 2;
  t["decoder_sparse_step"] = 2;
  t["mlp_only_layers"] = {1, 4};
  c = Qwen3VLConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.text.moe.num_experts, 16);
  EXPECT_EQ(c.text.moe.top_k, 2);
  std::vector<int64_t> sparse;
  for (int64_t l = 0; l < 8; ++l)
    if (c.text.moe.is_moe_layer(l)) sparse.push_back(l);
  EXPECT_EQ(sparse, (std::vector<int64_t>{3, 5, 7}));  // (l + 1) % 2 == 0, less layer 1
  t["mlp_only_layers"] = {48};
  try {
    Qwen3VLConfig::from_json(j, "cfg.json");
    ADD_FAILURE() << "mlp_only_layers outside the layers accepted";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json (text_config): mlp_only_layers entry 48"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace vlm
