// model/families/qwen3_vl_config.h: the released Qwen3-VL-8B-Instruct config.json (4.57 layout:
// rope_scaling + rope_theta in text_config) and its transformers 5 form (rope_parameters), the
// defaults transformers fills in, and malformed configs refused naming the field.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/families/qwen3_vl_config.h"

namespace vlm {
namespace {

using nlohmann::json;

// Qwen/Qwen3-VL-8B-Instruct's config.json as published (transformers 4.57.0.dev0): 36 layers of
// H 32 / Hkv 8 / D 128 over C 4096, rope theta 5e6 with interleaved [24, 20, 20]; a 27-block
// 1152-wide tower with DeepStack at blocks 8, 16, 24.
json qwen3vl_8b() {
  return json::parse(R"({
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
      "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
      "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
      "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 262144,
      "model_type": "qwen3_vl_text", "num_attention_heads": 32, "num_hidden_layers": 36,
      "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
      "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default"},
      "rope_theta": 5000000, "use_cache": true, "vocab_size": 151936
    },
    "tie_word_embeddings": false,
    "transformers_version": "4.57.0.dev0",
    "video_token_id": 151656,
    "vision_config": {
      "deepstack_visual_indexes": [8, 16, 24], "depth": 27, "hidden_act": "gelu_pytorch_tanh",
      "hidden_size": 1152, "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4304,
      "model_type": "qwen3_vl", "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 4096,
      "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652
  })");
}

std::string error_of(const json& j) {
  try {
    Qwen3VLConfig::from_json(j, "cfg.json");
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

void expect_8b(const Qwen3VLConfig& c) {
  EXPECT_EQ(c.text.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.text.family, DecoderFamily::Qwen3);
  EXPECT_TRUE(c.text.qk_norm);
  EXPECT_FALSE(c.text.qkv_bias);
  EXPECT_FALSE(c.text.o_bias);
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.num_layers, 36);
  EXPECT_EQ(c.text.num_heads, 32);
  EXPECT_EQ(c.text.num_kv_heads, 8);
  EXPECT_EQ(c.text.head_dim, 128);
  EXPECT_EQ(c.text.vocab_size, 151936);
  EXPECT_EQ(c.text.rope.type, RopeType::Default);
  EXPECT_EQ(c.text.rope.theta, 5e6);
  EXPECT_EQ(c.text.rope.mrope_section, (std::vector<int>{24, 20, 20}));
  EXPECT_TRUE(c.text.rope.mrope_interleaved);
  EXPECT_EQ(c.text.eos_token_ids, (std::vector<int64_t>{151645}));
  EXPECT_EQ(c.vision.depth, 27);
  EXPECT_EQ(c.vision.hidden_size, 1152);
  EXPECT_EQ(c.vision.intermediate_size, 4304);
  EXPECT_EQ(c.vision.num_heads, 16);
  EXPECT_EQ(c.vision.head_dim(), 72);
  EXPECT_EQ(c.vision.out_hidden_size, 4096);
  EXPECT_EQ(c.vision.num_position_embeddings, 2304);
  EXPECT_EQ(c.vision.grid_side(), 48);
  EXPECT_EQ(c.vision.patch_size, 16);
  EXPECT_EQ(c.vision.temporal_patch_size, 2);
  EXPECT_EQ(c.vision.spatial_merge_size, 2);
  EXPECT_EQ(c.vision.patch_dim(), 1536);
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<int>{8, 16, 24}));
  EXPECT_EQ(c.vision.num_deepstack(), 3);
  EXPECT_EQ(c.text.deepstack_layers, 3);  // the decoder adds the planes after layers 0, 1, 2
  EXPECT_EQ(c.image_token_id, 151655);
  EXPECT_EQ(c.video_token_id, 151656);
  EXPECT_EQ(c.vision_start_token_id, 151652);
  EXPECT_EQ(c.vision_end_token_id, 151653);
}

TEST(Qwen3VLConfig, ReleasedEightBConfig) { expect_8b(Qwen3VLConfig::from_json(qwen3vl_8b(), "cfg.json")); }

TEST(Qwen3VLConfig, TransformersFiveRopeParameters) {
  json j = qwen3vl_8b();
  json& t = j["text_config"];
  t["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000.0}, {"mrope_section", {24, 20, 20}},
                          {"mrope_interleaved", true}};
  t.erase("rope_scaling");
  t.erase("rope_theta");
  expect_8b(Qwen3VLConfig::from_json(j, "cfg.json"));
}

// transformers interleaves whatever mrope_interleaved says, and defaults the section and theta.
TEST(Qwen3VLConfig, TransformersDefaults) {
  json j = qwen3vl_8b();
  j["text_config"]["rope_scaling"] = {{"rope_type", "default"}, {"mrope_interleaved", false}};
  j["text_config"].erase("rope_theta");
  j["vision_config"] = {{"out_hidden_size", 4096}};
  const Qwen3VLConfig c = Qwen3VLConfig::from_json(j, "cfg.json");
  EXPECT_TRUE(c.text.rope.mrope_interleaved);
  EXPECT_EQ(c.text.rope.mrope_section, (std::vector<int>{24, 20, 20}));
  EXPECT_EQ(c.text.rope.theta, 500000.0);
  EXPECT_EQ(c.vision.depth, 27);
  EXPECT_EQ(c.vision.hidden_size, 1152);
  EXPECT_EQ(c.vision.deepstack_visual_indexes, (std::vector<int>{8, 16, 24}));
}

// The same text_config on its own (a text model) keeps main's refusal of interleaved M-RoPE.
TEST(Qwen3VLConfig, PlainTextConfigStillRefusesInterleavedMrope) {
  json t = qwen3vl_8b()["text_config"];
  t["architectures"] = {"Qwen3ForCausalLM"};
  try {
    ModelConfig::from_json(t, "text.json");
    FAIL() << "accepted";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("mrope_interleaved=true"), std::string::npos) << e.what();
  }
}

TEST(Qwen3VLConfig, MalformedConfigsAreRefusedNamingTheField) {
  struct Case {
    const char* want;
    void (*edit)(json&);
  };
  const Case cases[] = {
      {"is not Qwen3-VL", [](json& j) { j["architectures"] = {"Qwen2VLForConditionalGeneration"}; }},
      {"text_config is missing", [](json& j) { j.erase("text_config"); }},
      {"mrope_section must be 3 sections", [](json& j) { j["text_config"]["rope_scaling"]["mrope_section"] = {24, 20, 21}; }},
      {"mrope_section must be a list", [](json& j) { j["text_config"]["rope_scaling"]["mrope_section"] = 64; }},
      {"mrope_interleaved must be a boolean", [](json& j) { j["text_config"]["rope_scaling"]["mrope_interleaved"] = "yes"; }},
      {"unsupported hidden_act \"gelu\"", [](json& j) { j["vision_config"]["hidden_act"] = "gelu"; }},
      {"in_channels 4", [](json& j) { j["vision_config"]["in_channels"] = 4; }},
      {"num_position_embeddings 2300 is not a perfect square", [](json& j) { j["vision_config"]["num_position_embeddings"] = 2300; }},
      {"num_position_embeddings must be a positive integer", [](json& j) { j["vision_config"]["num_position_embeddings"] = 0; }},
      {"depth must be a positive integer", [](json& j) { j["vision_config"]["depth"] = "27"; }},
      {"deepstack_visual_indexes entry 27", [](json& j) { j["vision_config"]["deepstack_visual_indexes"] = {8, 27}; }},
      {"deepstack_visual_indexes entry 8", [](json& j) { j["vision_config"]["deepstack_visual_indexes"] = {8, 8}; }},
      {"deepstack_visual_indexes entry -1", [](json& j) { j["vision_config"]["deepstack_visual_indexes"] = {-1}; }},
      {"deepstack_visual_indexes must be a list", [](json& j) { j["vision_config"]["deepstack_visual_indexes"] = 8; }},
      {"default deepstack_visual_indexes", [](json& j) {
         j["vision_config"].erase("deepstack_visual_indexes");
         j["vision_config"]["depth"] = 12;
       }},
      {"heads of a multiple of 4 dims", [](json& j) { j["vision_config"]["num_heads"] = 5; }},
      {"vision_config is not a JSON object", [](json& j) { j["vision_config"] = 3; }},
      {"out_hidden_size 3584 is not text_config.hidden_size 4096", [](json& j) { j["vision_config"]["out_hidden_size"] = 3584; }},
      {"image_token_id must be a token id", [](json& j) { j["image_token_id"] = 151936; }},
      {"unsupported hidden_act 'gelu'", [](json& j) { j["text_config"]["hidden_act"] = "gelu"; }},
      {"layer_types entry", [](json& j) { j["text_config"]["layer_types"] = {"sliding_attention"}; }},
      // issue 40 item 4: a rope type or DeepStack layout we do not implement is refused by name.
      {"rope_scaling.rope_type 'yarn' is not implemented for Qwen3-VL", [](json& j) {
         j["text_config"]["rope_scaling"]["rope_type"] = "yarn";
         j["text_config"]["rope_scaling"]["factor"] = 4.0;
         j["text_config"]["rope_scaling"]["original_max_position_embeddings"] = 32768;
       }},
      {"deepstack_visual_indexes has 3 entries, and the decoder has only 2 layers", [](json& j) {
         j["text_config"]["num_hidden_layers"] = 2;
       }},
  };
  for (const Case& k : cases) {
    json j = qwen3vl_8b();
    k.edit(j);
    const std::string e = error_of(j);
    EXPECT_NE(e.find(k.want), std::string::npos) << "want '" << k.want << "', got '" << e << "'";
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
  }
}

TEST(Qwen3VLConfig, TinyFixtureShapes) {
  // The shapes tools/fixtures/make_qwen3_vl_fixtures.py builds: an 8 x 8 table, DeepStack [0, 1].
  json j = qwen3vl_8b();
  j["text_config"].update(json{{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 3},
                               {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32}});
  j["text_config"]["rope_scaling"]["mrope_section"] = {6, 5, 5};
  j["vision_config"].update(json{{"depth", 3}, {"hidden_size", 32}, {"intermediate_size", 64}, {"num_heads", 2},
                                 {"out_hidden_size", 64}, {"num_position_embeddings", 64},
                                 {"deepstack_visual_indexes", {0, 1}}});
  const Qwen3VLConfig c = Qwen3VLConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.text.rope.mrope_section, (std::vector<int>{6, 5, 5}));
  EXPECT_EQ(c.vision.grid_side(), 8);
  EXPECT_EQ(c.vision.head_dim(), 16);
  EXPECT_EQ(c.vision.num_deepstack(), 2);
}

}  // namespace
}  // namespace vlm
