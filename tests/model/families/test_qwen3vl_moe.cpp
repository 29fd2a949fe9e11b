// Qwen3-VL-MoE (Qwen3VLMoeForConditionalGeneration) on the CPU without its HF fixtures: checkpoints
// written here from the dense Qwen3-VL fixture (tests/fixtures/qwen3vl, transformers 5.17) with its
// MLPs made mixtures of 8 experts, top 2:
//  - every expert a copy of the layer's dense MLP, a random router: the renormalised top-2 weights
//    sum to 1, so the model is the dense one and must give HF's dense logits (<= 1e-4 relative) and
//    greedy tokens, on text, an image and a video; the layer in mlp_only_layers keeps its MLP;
//  - random distinct experts stored per expert, fused [E, 2I, C] and fused [E, C, 2I] (the released
//    layout): the same logits bit for bit, far from the dense ones (the experts are read);
//  - decoder_sparse_step 2 makes only odd layers sparse; what we do not read is refused naming it
//    (a shared expert, a router bias, experts on a layer kept dense, another gating in the config).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/families/architecture.h"
#include "model/families/qwen3_vl.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/qwen3vl_moe_checkpoint.h"

namespace vlm {
namespace {

using nlohmann::json;

#define SKIP_WITHOUT_DENSE_FIXTURE()                                                                      \
  if (!testing::qwen3vl_fixture_present())                                                              \
  GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not present (tools/fixtures/make_qwen3_vl_fixtures.py)"

using testing::MoeCheckpoint;
using testing::MoeCheckpointSpec;
constexpr int64_t kE = testing::kQwen3VLMoeExperts, kC = 64, kDenseI = 128;

struct MoeRun {
  std::vector<int32_t> greedy;
  std::vector<float> rows;  // [L, V] every prompt row
};
MoeRun run(const Qwen3VLModel& model, const testing::Qwen3VLReference& ref, int k, int chunk) {
  MoeRun r;
  r.greedy = testing::qwen3vl_run(model, ref, k, chunk, 8, r.rows);
  return r;
}

double rel_error(const MoeRun& r, const std::vector<float>& want, int64_t V) {
  return testing::max_row_rel_error(r.rows.data(), want.data(), static_cast<int64_t>(want.size()) / V, V);
}

TEST(Qwen3VLMoe, IdenticalExpertsGiveTheDenseModelsHfLogits) {
  SKIP_WITHOUT_DENSE_FIXTURE();
  const MoeCheckpoint ck({}, "same");
  EXPECT_EQ(detect_architecture(ck.dir()), ModelArchitecture::Qwen3VL);
  const auto model = Qwen3VLModel::load(ck.dir());
  const ModelConfig& tc = model->decoder().config();
  ASSERT_EQ(tc.architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(tc.moe.norm_topk_prob);
  EXPECT_TRUE(tc.moe.is_moe_layer(0) && !tc.moe.is_moe_layer(1) && tc.moe.is_moe_layer(2));
  const auto ref = testing::qwen3vl_reference();
  for (int k : {0, 1, 3, 4}) {  // text, an image, a video, mixed
    const std::string p = "p" + std::to_string(k);
    for (int chunk : {1000, 7}) {
      const MoeRun r = run(*model, ref, k, chunk);
      EXPECT_EQ(r.greedy, ref.ints(p + ".greedy")) << p << " chunk " << chunk;
      const double err = rel_error(r, ref.floats(p + ".logits"), tc.vocab_size);
      EXPECT_LE(err, 1e-4) << p << " chunk " << chunk;
      std::printf("%s chunk %d: max row relative error vs HF's dense model %.2e\n", p.c_str(), chunk, err);
    }
  }
}

TEST(Qwen3VLMoe, TheThreeExpertLayoutsGiveTheSameLogitsBitForBit) {
  SKIP_WITHOUT_DENSE_FIXTURE();
  const auto ref = testing::qwen3vl_reference();
  std::map<int, MoeRun> first;
  for (ExpertLayout layout : {ExpertLayout::PerExpert, ExpertLayout::Fused, ExpertLayout::FusedTransposed}) {
    MoeCheckpointSpec spec;
    spec.identical = false;
    spec.layout = layout;
    const MoeCheckpoint ck(spec, "layout" + std::to_string(static_cast<int>(layout)));
    const auto model = Qwen3VLModel::load(ck.dir());
    for (int k : {1, 3}) {
      MoeRun r = run(*model, ref, k, 7);
      if (layout == ExpertLayout::PerExpert) {
        // Random experts: far from the dense model (so the experts are what the logits read).
        EXPECT_GT(rel_error(r, ref.floats("p" + std::to_string(k) + ".logits"), 2048), 1e-2) << k;
        first[k] = std::move(r);
        continue;
      }
      EXPECT_EQ(r.rows, first[k].rows) << "layout " << static_cast<int>(layout) << " case " << k;
      EXPECT_EQ(r.greedy, first[k].greedy);
    }
  }
}

TEST(Qwen3VLMoe, SparseStepKeepsLayersDense) {
  SKIP_WITHOUT_DENSE_FIXTURE();
  MoeCheckpointSpec spec;
  spec.sparse_step = 2;  // layer 1 only
  spec.mlp_only = {};
  const MoeCheckpoint ck(spec, "step");
  const auto model = Qwen3VLModel::load(ck.dir());
  const MoeConfig& m = model->decoder().config().moe;
  EXPECT_TRUE(!m.is_moe_layer(0) && m.is_moe_layer(1) && !m.is_moe_layer(2));
  const auto ref = testing::qwen3vl_reference();
  const MoeRun r = run(*model, ref, 1, 1000);
  EXPECT_EQ(r.greedy, ref.ints("p1.greedy"));
  EXPECT_LE(rel_error(r, ref.floats("p1.logits"), 2048), 1e-4);
}

void expect_refused(const MoeCheckpointSpec& spec, const std::string& tag, const std::string& needle) {
  const MoeCheckpoint ck(spec, tag);
  try {
    Qwen3VLModel::load(ck.dir());
    ADD_FAILURE() << tag << ": loaded; wanted a refusal naming " << needle;
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << tag << ": " << e.what();
  }
}

TEST(Qwen3VLMoe, WhatWeDoNotReadIsRefusedNamingIt) {
  SKIP_WITHOUT_DENSE_FIXTURE();
  // bf16 1.0, as many as the largest tensor below ([kE, 2 * kDenseI, kC]) reads
  static std::vector<uint16_t> junk(static_cast<size_t>(kE) * 2 * kDenseI * kC, 0x3f80);
  auto add = [](const std::string& name, Shape shape) {
    return [name, shape](std::map<std::string, TensorView>& t) { t[name] = TensorView(junk.data(), DType::BF16, shape); };
  };
  MoeCheckpointSpec s;
  s.edit_tensors = add("model.language_model.layers.0.mlp.shared_expert.gate_proj.weight", Shape{kDenseI, kC});
  expect_refused(s, "shared", "checkpoint tensor model.language_model.layers.0.mlp.shared_expert.gate_proj.weight is "
                              "not read: layer 0 is a mixture of 8 experts");
  s.edit_tensors = add("model.language_model.layers.2.mlp.gate.bias", Shape{kE});
  expect_refused(s, "bias", "model.language_model.layers.2.mlp.gate.bias is not read");
  s.edit_tensors = add("model.language_model.layers.1.mlp.experts.gate_up_proj", Shape{kE, 2 * kDenseI, kC});
  expect_refused(s, "dense", "model.language_model.layers.1.mlp.experts.gate_up_proj is not read: layer 1 is dense");
  s.edit_tensors = [](std::map<std::string, TensorView>& t) {
    std::erase_if(t, [](const auto& kv) { return kv.first.find("layers.2.mlp.experts.") != std::string::npos; });
  };
  expect_refused(s, "none", "neither model.language_model.layers.2.mlp.experts.gate_up_proj");
  s.edit_tensors = nullptr;
  s.edit_config = [](json& c) { c["text_config"]["scoring_func"] = "sigmoid"; };
  expect_refused(s, "gating", "(text_config): scoring_func 'sigmoid'");
  s.edit_config = [](json& c) { c["text_config"]["shared_expert_intermediate_size"] = 64; };
  expect_refused(s, "shared_cfg", "(text_config): shared_expert_intermediate_size = 64");
}

}  // namespace
}  // namespace vlm
