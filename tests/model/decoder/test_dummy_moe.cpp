// --load-format dummy over mixture-of-experts decoders: the dummy store answers the experts fused
// as transformers 5 saves them (experts.gate_up_proj [E, 2I, C], experts.down_proj [E, C, I]) and
// the router mlp.gate.weight [E, C], with the values of the name rule (DummyWeights). A 2-layer
// Qwen3-MoE config (one MoE layer, one dense) runs a prefill and greedy steps on the CPU, bit-equal
// over two loads; Qwen3-VL-MoE's dummy load makes exactly the tensors its fixture checkpoint holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include "kernels/core/check.h"
#include "model/decoder/llm_decoder.h"
#include "model/families/qwen3_vl.h"
#include "tests/support/decoder_harness.h"

namespace vlm {
namespace {

namespace fs = std::filesystem;

WeightLoadOptions dummy() {
  WeightLoadOptions o;
  o.format = LoadFormat::Dummy;
  return o;
}

// C = 64, E = 8 experts of I = 48 (top 2), layer 0 MoE, layer 1 dense (mlp_only_layers), f32.
constexpr int64_t kC = 64, kE = 8, kI = 48;

// A directory holding only a 2-layer Qwen3-MoE config.json (removed with the object).
struct MoeConfigDir {
  MoeConfigDir() : dir(fs::temp_directory_path() / ("vlm_dummy_moe_" + std::to_string(::getpid()))) {
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "torch_dtype": "float32",
  "vocab_size": 384, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
  "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": false, "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 48, "norm_topk_prob": true,
  "decoder_sparse_step": 1, "mlp_only_layers": [1]
})";
  }
  ~MoeConfigDir() { fs::remove_all(dir); }
  fs::path dir;
};

// One name for both checkpoint layouts (transformers 5 nests the decoder and the vision tower under model.).
std::string layout_free(std::string n) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"model.language_model.", "model."},
                                 {"model.visual.", "visual."}})
    if (n.rfind(from, 0) == 0) n = to + n.substr(from.size());
  return n;
}

std::map<std::string, std::string> made_shapes(const DummyWeights& w) {
  std::map<std::string, std::string> out;
  for (const auto& [n, s] : w.made()) out[layout_free(n)] = s.str();
  return out;
}

TEST(DummyMoe, Qwen3MoeMakesFusedExpertsAndRouter) {
  MoeConfigDir cfg;
  const auto d = LlmDecoder::load(cfg.dir.string(), dummy());
  const DummyWeights& w = *d->weights().dummy_weights();
  const auto shapes = made_shapes(w);
  const std::string moe = "model.layers.0.mlp.", dense = "model.layers.1.mlp.";
  EXPECT_EQ(shapes.at(moe + "experts.gate_up_proj"), (Shape{kE, 2 * kI, kC}.str()));
  EXPECT_EQ(shapes.at(moe + "experts.down_proj"), (Shape{kE, kC, kI}.str()));
  EXPECT_EQ(shapes.at(moe + "gate.weight"), (Shape{kE, kC}.str()));
  EXPECT_EQ(shapes.count(moe + "gate_proj.weight"), 0u);
  EXPECT_EQ(shapes.at(dense + "gate_proj.weight"), (Shape{160, kC}.str()));  // the dense layer keeps its MLP
  EXPECT_EQ(shapes.count(dense + "experts.gate_up_proj"), 0u);
  for (const auto& [n, s] : shapes) EXPECT_EQ(n.find(".experts.0."), std::string::npos) << n;  // not per expert
  // The values are the name rule's: what fill() makes of the name, and a slice of one expert (rows
  // of the [E, 2I * C] view, what a tensor-parallel rank would ask) is the same block of the whole.
  const std::string gu = moe + "experts.gate_up_proj";
  const TensorView held = w.held().at(gu);
  ASSERT_EQ(held.dtype, DType::F32);
  Tensor again = Tensor::empty(held.shape, DType::F32);
  DummyWeights::fill(gu, again.view());
  EXPECT_EQ(std::memcmp(again.view().data, held.data, static_cast<size_t>(held.nbytes())), 0);
  DummyWeights fresh(cfg.dir.string(), DType::F32, -1);
  const TensorView e3 = fresh.get_slice(gu, held.shape, 3, 4, 0, 2 * kI * kC);
  ASSERT_EQ(e3.numel(), 2 * kI * kC);
  EXPECT_EQ(std::memcmp(e3.data, static_cast<const float*>(held.data) + 3 * 2 * kI * kC,
                        static_cast<size_t>(e3.nbytes())),
            0);
  // Uniform in [-a, a], not constant: a weight, not a norm scale.
  const float* v = static_cast<const float*>(held.data);
  float lo = v[0], hi = v[0];
  for (int64_t i = 0; i < held.numel(); ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  EXPECT_LT(lo, -0.03f);
  EXPECT_GT(hi, 0.03f);
  EXPECT_LE(hi, 0.0347f);
}

TEST(DummyMoe, Qwen3MoeCpuPrefillAndGreedyAreBitEqualOverTwoLoads) {
  MoeConfigDir cfg;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> tokens;
  for (int load = 0; load < 2; ++load) {
    testing::DecoderRunner r(cfg.dir.string(), 4, 32, DType::F32, 7, dummy());
    ASSERT_TRUE(r.decoder().config().moe.enabled());
    testing::TestSequence s;
    s.tokens = {1, 17, 230, 5, 99, 300, 3, 64, 12};  // < 384, the vocabulary
    r.prefill(s, 4);
    tokens.push_back(r.greedy(s, 3));
    ASSERT_EQ(static_cast<int64_t>(s.logits.size()), 11 * r.vocab());  // 9 prompt rows + 2 fed greedy tokens
    for (float x : s.logits) ASSERT_TRUE(std::isfinite(x));
    logits.push_back(s.logits);
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
  // Not degenerate: the rows differ from one another.
  const int64_t V = 384;
  EXPECT_NE(std::memcmp(logits[0].data(), logits[0].data() + V, V * sizeof(float)), 0);
}

// Qwen3-VL-MoE (its decoder under model.language_model.): the dummy load makes the tensors the
// fixture checkpoint (saved by transformers 5: fused [E, 2I, C]) holds, with their shapes.
TEST(DummyMoe, Qwen3VLMoeMakesTheFixtureCheckpointsTensors) {
  const std::string dir = std::string(VLM_FIXTURES_DIR) + "/qwen3vl_moe/qwen3_vl_moe_tiny";
  const auto m = Qwen3VLModel::load(dir, dummy());
  const DummyWeights* w = m->decoder().weights().dummy_weights();
  ASSERT_NE(w, nullptr);
  std::map<std::string, std::string> want;
  const WeightStore store = WeightStore::open(dir);
  for (const auto& [n, t] : store.tensors()) want[layout_free(n)] = t.shape.str();
  EXPECT_EQ(made_shapes(*w), want);
}

}  // namespace
}  // namespace vlm
