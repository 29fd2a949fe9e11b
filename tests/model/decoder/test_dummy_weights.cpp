// --load-format dummy (WeightStore::dummy, DummyWeights): tensors made on request from config.json.
// The values' rules and determinism, the streaming budget, the tensors a dummy load makes against
// the committed fixtures' safetensors headers, a CPU forward bit for bit twice, config errors, and
// the 72B memory plan (DecoderFootprint) for Qwen2-VL-72B on one H200.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include "kernels/core/check.h"
#include "model/decoder/llm_decoder.h"
#include "model/decoder/weight_footprint.h"
#include "model/families/qwen2_vl.h"
#include "tests/support/decoder_harness.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;

WeightLoadOptions dummy(int64_t keep_bytes = -1) {
  WeightLoadOptions o;
  o.format = LoadFormat::Dummy;
  o.dummy_keep_bytes = keep_bytes;
  return o;
}

std::vector<float> values(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.data, t.dtype, out.data(), t.numel());
  return out;
}

// One name for both checkpoint layouts (transformers 5 nests the decoder and the vision tower under model.).
std::string layout_free(std::string n) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"model.language_model.", "model."},
                                 {"model.visual.", "visual."}})
    if (n.rfind(from, 0) == 0) n = to + n.substr(from.size());
  return n;
}

std::map<std::string, std::string> shapes_of(const std::vector<std::pair<std::string, Shape>>& made) {
  std::map<std::string, std::string> out;
  for (const auto& [n, s] : made) out[layout_free(n)] = s.str();
  return out;
}

std::map<std::string, std::string> checkpoint_shapes(const std::string& dir) {
  std::map<std::string, std::string> out;
  const WeightStore store = WeightStore::open(dir);
  for (const auto& [n, t] : store.tensors()) out[layout_free(n)] = t.shape.str();
  return out;
}

TEST(DummyWeights, ValuesFollowTheNameRules) {
  DummyWeights w("test", DType::F32, -1);
  const std::vector<float> m = values(w.get("model.layers.0.mlp.up_proj.weight", {512, 2048}));
  double sum = 0, sq = 0;
  for (float v : m) {
    ASSERT_LE(std::fabs(v), 0.0347f);
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(m.size()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-3);
  EXPECT_NEAR(sd, 0.02, 5e-4);  // uniform in [-0.02 sqrt 3, 0.02 sqrt 3]
  for (const char* norm : {"model.norm.weight", "model.layers.3.input_layernorm.weight", "visual.merger.ln_q.weight",
                           "model.layers.1.self_attn.q_norm.weight", "visual.blocks.0.norm1.weight"})
    for (float v : values(w.get(norm, {64}))) ASSERT_EQ(v, 1.0f) << norm;
  double bias_abs = 0;
  for (float v : values(w.get("model.layers.0.self_attn.q_proj.bias", {4096}))) {
    ASSERT_LE(std::fabs(v), 0.002f);
    bias_abs += std::fabs(v);
  }
  EXPECT_GT(bias_abs, 0.0);  // small, not zero
}

TEST(DummyWeights, SameNameSameBitsWhateverTheOrderOrBudget) {
  const std::vector<std::pair<std::string, Shape>> ts = {
      {"a.q_proj.weight", {300, 257}}, {"a.k_proj.weight", {129, 64}}, {"b.bias", {7}}, {"big.weight", {1024, 1030}}};
  DummyWeights first("one", DType::BF16, -1), second("two", DType::BF16, /*keep_bytes=*/4096);
  std::map<std::string, std::vector<uint8_t>> bytes;
  for (const auto& [n, s] : ts) {
    const TensorView t = first.get(n, s);
    bytes[n].assign(static_cast<const uint8_t*>(t.data), static_cast<const uint8_t*>(t.data) + t.nbytes());
  }
  for (int round = 0; round < 2; ++round)  // the second round remakes what the budget dropped
    for (auto it = ts.rbegin(); it != ts.rend(); ++it) {
      const TensorView t = second.get(it->first, it->second);
      ASSERT_EQ(static_cast<size_t>(t.nbytes()), bytes[it->first].size());
      EXPECT_EQ(std::memcmp(t.data, bytes[it->first].data(), bytes[it->first].size()), 0) << it->first;
    }
  // Other names give other values.
  const TensorView a = first.get("a.q_proj.weight", {300, 257}), c = first.get("c.q_proj.weight", {300, 257});
  EXPECT_NE(std::memcmp(a.data, c.data, static_cast<size_t>(a.nbytes())), 0);
}

TEST(DummyWeights, StreamingHoldsAtMostTheBudget) {
  const int64_t budget = 3 * 1000 * 1000 * 2;  // three [1000, 1000] bf16 tensors
  DummyWeights w("stream", DType::BF16, budget);
  for (int i = 0; i < 10; ++i) {
    w.get("layers." + std::to_string(i) + ".weight", {1000, 1000});
    EXPECT_LE(w.bytes_held(), budget);
  }
  EXPECT_EQ(w.held().size(), 3u);
  EXPECT_EQ(w.bytes_made(), 10 * 2000000);
  w.get("layers.0.weight", {1000, 1000});  // dropped: made again
  EXPECT_EQ(w.bytes_made(), 11 * 2000000);
  EXPECT_EQ(w.made().size(), 10u);  // names asked for, once each
}

TEST(DummyWeights, ASecondShapeForANameIsALoadError) {
  DummyWeights w("dir", DType::F32, -1);
  w.get("x.weight", {4, 8});
  try {
    w.get("x.weight", {8, 4});
    FAIL() << "no LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("x.weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w.get("y.weight", Shape{0, 3}), LoadError);
}

// Every tensor the committed checkpoint holds is made, with its shape, and nothing else.
TEST(DummyLoad, MakesEveryTensorOfTheCheckpointWithItsShape) {
  for (const char* name : {"qwen2_tiny", "llama_tiny", "qwen3_tiny"}) {
    const std::string dir = testing::fixture_model_dir(name);
    const auto d = LlmDecoder::load(dir, dummy());
    ASSERT_NE(d->weights().dummy_weights(), nullptr);
    EXPECT_EQ(shapes_of(d->weights().dummy_weights()->made()), checkpoint_shapes(dir)) << name;
  }
  const std::string vl = std::string(VLM_FIXTURES_DIR) + "/qwen2vl/qwen2_vl_tiny";
  const auto m = Qwen2VLModel::load(vl, dummy());
  EXPECT_EQ(shapes_of(m->decoder().weights().dummy_weights()->made()), checkpoint_shapes(vl));
}

TEST(DummyLoad, CpuForwardIsDeterministic) {
  std::vector<std::vector<float>> logits;
  for (int load = 0; load < 2; ++load) {
    testing::DecoderRunner r("qwen2_tiny", 4, 32, DType::F32, 7, dummy());
    testing::TestSequence s;
    s.tokens = {1, 17, 230, 5, 99, 300, 3, 64, 12};  // < 384, the vocabulary
    r.prefill(s, 4);
    ASSERT_EQ(static_cast<int64_t>(s.logits.size()), 9 * r.vocab());
    for (float v : s.logits) ASSERT_TRUE(std::isfinite(v));
    logits.push_back(s.logits);
  }
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
  // The checkpoint's own weights give other logits: the dummy ones were used.
  testing::DecoderRunner real("qwen2_tiny", 4, 32);
  testing::TestSequence s;
  s.tokens = {1, 17, 230, 5, 99, 300, 3, 64, 12};  // < 384, the vocabulary
  real.prefill(s, 4);
  EXPECT_NE(std::memcmp(s.logits.data(), logits[0].data(), logits[0].size() * sizeof(float)), 0);
}

// A streaming store (a GPU loader's source) makes nothing until asked and has no CPU decoder.
TEST(DummyLoad, StreamingStoreBuildsNoCpuLayers) {
  const auto d = LlmDecoder::load(testing::fixture_model_dir("qwen2_tiny"), dummy(1 << 20));
  EXPECT_TRUE(d->weights().streaming());
  EXPECT_EQ(d->weights().dummy_weights()->bytes_made(), 0);
  std::vector<float> logits;
  EXPECT_THROW(d->forward(ForwardBatch{}, {}, logits), InternalError);
}

TEST(DummyLoad, MissingOrBadConfigIsALoadErrorNamingIt) {
  const fs::path dir = fs::temp_directory_path() / ("vlm_dummy_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto expect_error = [&](const std::string& want) {
    try {
      LlmDecoder::load(dir.string(), dummy());
      ADD_FAILURE() << "no LoadError (want '" << want << "')";
    } catch (const LoadError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  };
  expect_error("cannot open");  // no config.json
  std::ofstream(dir / "config.json") << "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": ";
  expect_error("invalid JSON");
  fs::copy_file(testing::fixture_model_dir("qwen2_tiny") + "/config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(LlmDecoder::load(dir.string(), dummy()));  // config.json alone is enough
  EXPECT_THROW(LlmDecoder::load(dir.string()), LoadError);   // auto still wants the safetensors
  std::ifstream in(dir / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const size_t at = text.find("bfloat16");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 8, "bfloat13");
  std::ofstream(dir / "config.json") << text;
  expect_error("bfloat13");
  fs::remove_all(dir);
}

TEST(DummyLoad, ParseLoadFormat) {
  EXPECT_EQ(parse_load_format("auto"), LoadFormat::Auto);
  EXPECT_EQ(parse_load_format("safetensors"), LoadFormat::Safetensors);
  EXPECT_EQ(parse_load_format("dummy"), LoadFormat::Dummy);
  EXPECT_FALSE(parse_load_format("pt").has_value());
}

// Qwen2-VL's vision tower parameters (not 2.5): patch embedding, blocks, merger.
int64_t qwen2_vision_params(const Qwen2VisionConfig& v) {
  const int64_t Cv = v.hidden_size, Iv = v.intermediate_size, M = Cv * v.spatial_merge_size * v.spatial_merge_size;
  const int64_t block = 4 * Cv + (3 * Cv * Cv + 3 * Cv) + (Cv * Cv + Cv) + (Iv * Cv + Iv) + (Cv * Iv + Cv);
  return Cv * v.patch_dim() + v.depth * block + 2 * Cv + (M * M + M) + (v.out_hidden_size * M + v.out_hidden_size);
}

TEST(DummyLoad, FootprintCountsWhatTheArchitectureAsksFor) {
  const std::string vl = std::string(VLM_FIXTURES_DIR) + "/qwen2vl/qwen2_vl_tiny";
  const auto m = Qwen2VLModel::load(vl, dummy());
  int64_t decoder = 0, vision = 0;
  for (const auto& [n, s] : m->decoder().weights().dummy_weights()->made())
    (layout_free(n).rfind("visual.", 0) == 0 ? vision : decoder) += s.numel();
  EXPECT_EQ(decoder_footprint(m->config().text).params(), decoder);
  EXPECT_EQ(qwen2_vision_params(m->config().vision), vision);
  for (const char* name : {"qwen2_tiny", "qwen3_tiny", "llama_tiny"}) {
    const auto d = LlmDecoder::load(testing::fixture_model_dir(name), dummy());
    int64_t made = 0;
    for (const auto& [n, s] : d->weights().dummy_weights()->made()) made += s.numel();
    EXPECT_EQ(decoder_footprint(d->config()).params(), made) << name;
  }
}

// Issue 43: Qwen2-VL-72B's shapes (bench/cuda/configs/qwen2_vl_72b/config.json) on one H200
// (141 GB): bf16 weights alone do not fit; FP8 decoder weights (LM head, embedding and vision
// tower bf16) with a bf16 KV cache of 64 sequences x (1K context + 64 steps) do.
TEST(DummyLoad, Qwen2VL72BFitsOneH200InFp8) {
  const Qwen2VLConfig c = Qwen2VLConfig::load(std::string(VLM_FIXTURES_DIR) + "/../../bench/cuda/configs/qwen2_vl_72b");
  ASSERT_EQ(c.text.hidden_size, 8192);
  ASSERT_EQ(c.text.num_layers, 80);
  ASSERT_EQ(c.text.num_heads, 64);
  ASSERT_EQ(c.text.num_kv_heads, 8);
  ASSERT_EQ(c.text.intermediate_size, 29568);
  ASSERT_EQ(c.text.vocab_size, 152064);
  const DecoderFootprint f = decoder_footprint(c.text);
  const int64_t vision = 2 * qwen2_vision_params(c.vision);
  const int64_t kv = kv_cache_bytes(c.text, 64 * (1024 + 64 + 8), 2);
  const double h200 = 141e9;
  std::printf("Qwen2-VL-72B: decoder %.2f B params (%.2f B in linear layers), vision %.2f B params\n"
              "  bf16 weights %.1f GB; FP8 weights %.1f GB (+ vision bf16 %.2f GB); KV bf16 64 x 1.1K %.1f GB\n"
              "  one H200 (141 GB): bf16 %.1f GB %s; FP8 %.1f GB %s\n",
              f.params() / 1e9, f.linear_params / 1e9, vision / 2e9, f.bytes(false) / 1e9, f.bytes(true) / 1e9,
              vision / 1e9, kv / 1e9, (f.bytes(false) + vision + kv) / 1e9,
              f.bytes(false) + vision + kv < h200 ? "fits" : "does not fit", (f.bytes(true) + vision + kv) / 1e9,
              f.bytes(true) + vision + kv < h200 ? "fits" : "does not fit");
  EXPECT_GT(static_cast<double>(f.bytes(false)), h200);  // 145 GB of bf16 decoder weights
  EXPECT_LT(static_cast<double>(f.bytes(true) + vision + kv), 0.9 * h200);  // within --gpu-memory-utilization 0.9
  EXPECT_NEAR(static_cast<double>(f.params()), 72.7e9, 0.1e9);
}

}  // namespace
}  // namespace vlm
