// config.json parsing (both layouts) and the load errors of safetensors checkpoints: each
// names the file and the tensor at fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "model/decoder/llm_decoder.h"
#include "model/decoder/model_config.h"
#include "model/decoder/safetensors.h"
#include "model/decoder/weights.h"
#include "tests/support/decoder_harness.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json base_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
    "rope_theta": 500000.0, "torch_dtype": "bfloat16", "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
}

std::string error_of(const json& j) {
  try {
    ModelConfig::from_json(j, "cfg.json");
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ParsesLegacyLlama32Layout) {
  ModelConfig c = ModelConfig::from_json(base_config(), "cfg.json");
  EXPECT_EQ(c.family, DecoderFamily::Llama);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::Llama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.dtype, DType::BF16);
}

TEST(ModelConfig, ParsesTransformers5Layout) {
  json j = base_config();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0},
                          {"original_max_position_embeddings", 32768}};
  j["dtype"] = "float16";
  ModelConfig c = ModelConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_EQ(c.dtype, DType::F16);
}

TEST(ModelConfig, Qwen2LegacyYarnWithTypeKeyAndDefaults) {
  json j = json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936,
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "use_sliding_window": false, "tie_word_embeddings": true,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})");
  ModelConfig c = ModelConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.family, DecoderFamily::Qwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope.type, RopeType::Yarn);
  EXPECT_EQ(c.rope.original_max_position, 32768);
  // No head_dim and no num_key_value_heads: derived.
  j.erase("num_key_value_heads");
  EXPECT_EQ(ModelConfig::from_json(j, "cfg.json").num_kv_heads, 14);
}

TEST(ModelConfig, YarnWithoutFactorUsesContextRatio) {
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 4096}};
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j, "cfg.json").rope.factor, 131072.0 / 4096.0);
}

TEST(ModelConfig, ClearErrors) {
  json j = base_config();
  j["architectures"] = {"MistralForCausalLM"};
  j["model_type"] = "mistral";
  EXPECT_NE(error_of(j).find("unsupported architecture 'MistralForCausalLM'"), std::string::npos);
  j = base_config();
  j["rope_scaling"]["rope_type"] = "dynamic";
  EXPECT_NE(error_of(j).find("unsupported rope type 'dynamic'"), std::string::npos);
  j = base_config();
  j["hidden_act"] = "gelu";
  EXPECT_NE(error_of(j).find("hidden_act 'gelu'"), std::string::npos);
  j = base_config();
  j.erase("vocab_size");
  EXPECT_NE(error_of(j).find("'vocab_size'"), std::string::npos);
  j = base_config();
  j["num_key_value_heads"] = 5;
  EXPECT_NE(error_of(j).find("not a multiple"), std::string::npos);
  j = base_config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("use_sliding_window"), std::string::npos);
  EXPECT_NE(error_of(j).find("cfg.json"), std::string::npos);
}

// Qwen3 (issue 40), the released layout (Qwen3-8B's config.json: rope_theta at the top,
// rope_scaling null, torch_dtype) and transformers 5's (rope_parameters, dtype, layer_types).
json qwen3_8b_config() {
  return json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST(ModelConfig, Qwen3ReleasedLayout) {
  const ModelConfig c = ModelConfig::from_json(qwen3_8b_config(), "cfg.json");
  EXPECT_EQ(c.family, DecoderFamily::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::Default);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.rope.rotary_dim, 128);
  EXPECT_EQ(c.dtype, DType::BF16);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645}));
}

TEST(ModelConfig, Qwen3Transformers5LayoutTiedAndIndependentHeadDim) {
  json j = qwen3_8b_config();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("torch_dtype");
  j.erase("architectures");  // model_type alone names the family
  j["dtype"] = "float32";
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e6}};
  j["layer_types"] = json::array();
  for (int i = 0; i < 36; ++i) j["layer_types"].push_back("full_attention");
  j["hidden_size"] = 1024;  // Qwen3-0.6B: 16 heads of 128 over hidden 1024, tied, biased here
  j["num_attention_heads"] = 16;
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = true;
  const ModelConfig c = ModelConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.family, DecoderFamily::Qwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_heads * c.head_dim, 2048);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_DOUBLE_EQ(c.rope.theta, 5e6);
  EXPECT_EQ(c.dtype, DType::F32);
}

TEST(ModelConfig, Qwen3FieldsThatChangeTheMathAreRefusedNamingThem) {
  json j = qwen3_8b_config();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  EXPECT_NE(error_of(j).find("use_sliding_window"), std::string::npos) << error_of(j);
  j = qwen3_8b_config();
  j["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_NE(error_of(j).find("layer_types entry \"sliding_attention\""), std::string::npos) << error_of(j);
  j = qwen3_8b_config();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_NE(error_of(j).find("unsupported rope type 'dynamic'"), std::string::npos) << error_of(j);
  j = qwen3_8b_config();
  j["hidden_act"] = "gelu";
  EXPECT_NE(error_of(j).find("hidden_act 'gelu'"), std::string::npos) << error_of(j);
  // Qwen3-VL's text rope (interleaved M-RoPE) must not pass for Qwen2-VL's contiguous sections.
  j = qwen3_8b_config();
  j["rope_scaling"] = {{"rope_type", "default"}, {"mrope_section", {24, 20, 20}}, {"mrope_interleaved", true}};
  EXPECT_NE(error_of(j).find("mrope_interleaved=true"), std::string::npos) << error_of(j);
  j["rope_scaling"]["mrope_interleaved"] = false;
  EXPECT_EQ(error_of(j), "");
}

// A scratch copy of a fixture model that tests may damage.
class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("vlm_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(testing::fixture_model_dir("llama_tiny") + "/" + f, dir_ / f);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string load_error() {
    try {
      LlmDecoder::load(dir_.string());
    } catch (const LoadError& e) {
      return e.what();
    }
    return "";
  }
  // Rewrites model.safetensors with an edited header; data offsets are relative to the end of
  // the header, so the data section is kept as is.
  void edit_header(const std::function<void(json&)>& edit) {
    std::ifstream in(dir_ / "model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    json h = json::parse(bytes.substr(8, n));
    edit(h);
    const std::string header = h.dump();
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::ofstream out(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc);
    out << len << header << bytes.substr(8 + n);
  }
  fs::path dir_;
};

TEST_F(DamagedCheckpoint, IntactCopyLoads) { EXPECT_EQ(load_error(), ""); }

TEST_F(DamagedCheckpoint, TruncatedFileNamesFileAndTensor) {
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") - 100);
  const std::string e = load_error();
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor '"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, TruncatedHeader) {
  fs::resize_file(dir_ / "model.safetensors", 20);
  const std::string e = load_error();
  EXPECT_NE(e.find("truncated safetensors file"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, MissingTensor) {
  edit_header([](json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); });
  const std::string e = load_error();
  EXPECT_NE(e.find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, ShapeMismatch) {
  edit_header([](json& h) {
    h["model.norm.weight"]["shape"] = {32, 2};  // same byte count, wrong shape
  });
  const std::string e = load_error();
  EXPECT_NE(e.find("tensor 'model.norm.weight' has shape [32, 2], expected [64]"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, UnknownDtype) {
  edit_header([](json& h) { h["model.norm.weight"]["dtype"] = "F8_E5M2"; });
  const std::string e = load_error();
  EXPECT_NE(e.find("tensor 'model.norm.weight': unknown dtype 'F8_E5M2'"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, NonFloatDtype) {
  edit_header([](json& h) { h["model.norm.weight"]["dtype"] = "I16"; });
  const std::string e = load_error();
  EXPECT_NE(e.find("'model.norm.weight' has dtype I16"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, UnsupportedArchitecture) {
  std::ifstream in(dir_ / "config.json");
  json c = json::parse(in);
  c["architectures"] = {"GPT2LMHeadModel"};
  std::ofstream(dir_ / "config.json") << c.dump();
  const std::string e = load_error();
  EXPECT_NE(e.find("config.json: unsupported architecture 'GPT2LMHeadModel'"), std::string::npos) << e;
}

// A Qwen3 config over a checkpoint without q_norm / k_norm: the decoder asks for them by name.
TEST_F(DamagedCheckpoint, Qwen3WithoutQkNormWeightsNamesTheTensor) {
  std::ifstream in(dir_ / "config.json");
  json c = json::parse(in);
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["model_type"] = "qwen3";
  std::ofstream(dir_ / "config.json") << c.dump();
  const std::string e = load_error();
  EXPECT_NE(e.find("model.layers.0.self_attn.q_norm.weight"), std::string::npos) << e;
}

TEST_F(DamagedCheckpoint, MissingShardOfIndex) {
  json index = {{"metadata", {{"total_size", 1}}},
                {"weight_map", {{"model.norm.weight", "model-00001-of-00002.safetensors"}}}};
  std::ofstream(dir_ / "model.safetensors.index.json") << index.dump();
  const std::string e = load_error();
  EXPECT_NE(e.find("model-00001-of-00002.safetensors: shard listed in"), std::string::npos) << e;
}

TEST(WeightStore, ShardedCheckpointLoadsEveryTensor) {
  // qwen2_tiny is saved in 4 shards with an index.
  WeightStore w = WeightStore::open(testing::fixture_model_dir("qwen2_tiny"));
  EXPECT_TRUE(w.has("model.embed_tokens.weight"));
  EXPECT_TRUE(w.has("model.layers.2.mlp.down_proj.weight"));
  EXPECT_TRUE(w.has("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(w.get("model.norm.weight", {64}).dtype, DType::BF16);
}

}  // namespace
}  // namespace vlm
