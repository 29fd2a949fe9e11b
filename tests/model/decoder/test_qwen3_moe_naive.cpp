// Qwen3MoeForCausalLM on the CPU (LlamaDecoder with CpuLayers::moe on the layers the config names)
// against the naive double-precision forward of tests/support/qwen3_naive.h, on random
// checkpoints written here: 8 experts, top 2, one dense layer (mlp_only_layers), experts stored
// per expert, fused [E, 2I, C] and fused transposed [E, C, 2I] (equal logits bit for bit), with
// and without norm_topk_prob; whole prompts, chunked prefill and two sequences per step.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "kernels/core/check.h"
#include "model/decoder/safetensors.h"
#include "model/decoder/weights.h"
#include "tests/support/qwen3_naive.h"

namespace vlm::testing {
namespace {

Qwen3Shape moe_shape(ExpertLayout layout, bool norm_topk) {
  Qwen3Shape s;
  s.L = 3;
  s.E = 8;
  s.K = 2;
  s.MI = 24;  // 2I = 48 != C = 40, I != C: every fused shape reads one way only
  s.norm_topk = norm_topk;
  s.mlp_only = {1};
  s.experts = layout;
  return s;
}

std::vector<int32_t> prompt(size_t n, uint32_t seed, int64_t V) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  return ids;
}

const char* layout_name(ExpertLayout l) {
  return l == ExpertLayout::PerExpert ? "per_expert" : l == ExpertLayout::Fused ? "fused" : "fused_t";
}

class Qwen3MoeNaive : public ::testing::TestWithParam<std::tuple<ExpertLayout, bool>> {};

TEST_P(Qwen3MoeNaive, LogitsMatchTheNaiveForwardWholeChunkedAndBatched) {
  const Qwen3Shape s = moe_shape(std::get<0>(GetParam()), std::get<1>(GetParam()));
  const Qwen3Checkpoint ck = write_qwen3_checkpoint(
      s, std::string("vlm_qwen3_moe_") + layout_name(s.experts) + (s.norm_topk ? "_n" : "_r"), 77);
  const std::vector<int32_t> a = prompt(23, 7, s.V), b = prompt(9, 8, s.V);
  const auto want_a = naive_qwen3_logits(ck, a), want_b = naive_qwen3_logits(ck, b);
  {
    Qwen3Runner ours(ck.dir);
    const MoeConfig& m = ours.dec->config().moe;
    EXPECT_EQ(m.num_experts, 8);
    EXPECT_EQ(m.top_k, 2);
    EXPECT_EQ(m.norm_topk_prob, s.norm_topk);
    EXPECT_TRUE(m.is_moe_layer(0) && !m.is_moe_layer(1) && m.is_moe_layer(2));
    const auto got = ours.run({a}, {1 << 20});
    EXPECT_LE(max_row_rel(got[0], want_a), 1e-5) << "whole prompt";
  }
  {
    Qwen3Runner ours(ck.dir);
    const auto got = ours.run({a, b}, {5, 1});
    EXPECT_LE(max_row_rel(got[0], want_a), 1e-5) << "chunked by 5, batched";
    EXPECT_LE(max_row_rel(got[1], want_b), 1e-5) << "one token a step, batched";
  }
  std::filesystem::remove_all(ck.dir);
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndNorm, Qwen3MoeNaive,
                         ::testing::Combine(::testing::Values(ExpertLayout::PerExpert, ExpertLayout::Fused,
                                                              ExpertLayout::FusedTransposed),
                                            ::testing::Bool()));

// The same random weights (same seed) stored three ways give the same logits, bit for bit.
TEST(Qwen3Moe, TheThreeExpertLayoutsGiveTheSameLogitsBitForBit) {
  const std::vector<int32_t> a = prompt(31, 3, 96);
  std::vector<float> first;
  for (ExpertLayout l : {ExpertLayout::PerExpert, ExpertLayout::Fused, ExpertLayout::FusedTransposed}) {
    const Qwen3Checkpoint ck = write_qwen3_checkpoint(moe_shape(l, true), std::string("vlm_qwen3_moe_same_") + layout_name(l), 5);
    Qwen3Runner ours(ck.dir);
    const auto got = ours.run({a}, {1 << 20});
    if (first.empty()) first = got[0];
    else EXPECT_EQ(got[0], first) << layout_name(l);
    std::filesystem::remove_all(ck.dir);
  }
}

// decoder_sparse_step 2 and no mlp_only_layers: layers 1 and 3 sparse, 0 and 2 dense; and a fused
// shape that reads both ways (C = 2I = 40) taken as [E, 2I, C] for Qwen3MoeForCausalLM.
TEST(Qwen3Moe, SparseStepAndAnAmbiguousFusedShape) {
  Qwen3Shape s = moe_shape(ExpertLayout::Fused, false);
  s.L = 4;
  s.sparse_step = 2;
  s.mlp_only = {};
  s.MI = 20;
  const Qwen3Checkpoint ck = write_qwen3_checkpoint(s, "vlm_qwen3_moe_step", 9);
  const std::vector<int32_t> a = prompt(17, 4, s.V);
  Qwen3Runner ours(ck.dir);
  const MoeConfig& m = ours.dec->config().moe;
  EXPECT_TRUE(!m.is_moe_layer(0) && m.is_moe_layer(1) && !m.is_moe_layer(2) && m.is_moe_layer(3));
  EXPECT_LE(max_row_rel(ours.run({a}, {6})[0], naive_qwen3_logits(ck, a)), 1e-5);
  std::filesystem::remove_all(ck.dir);
}

// A copy of ck's checkpoint (config and tensors) with `edit` applied to its tensors.
std::string edited_copy(const Qwen3Checkpoint& ck, const std::string& tag,
                        const std::function<void(std::map<std::string, TensorView>&)>& edit) {
  const WeightStore store = WeightStore::open(ck.dir);
  std::map<std::string, TensorView> t = store.tensors();
  edit(t);
  const std::string dir = ck.dir + "_" + tag;
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(ck.dir + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  write_safetensors(dir + "/model.safetensors", t);
  return dir;
}

void expect_refused(const std::string& dir, const std::string& needle) {
  try {
    LlmDecoder::load(dir);
    ADD_FAILURE() << "loaded; wanted a refusal naming " << needle;
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// What we do not read is refused at load, naming it: missing experts, a fused tensor of another
// shape, shared-expert tensors (Qwen2-MoE's layout) beside the experts, a router bias,
// quantization scales, a router on a layer the config keeps dense.
TEST(Qwen3Moe, UnreadableExpertLayoutsAreRefusedNamingThem) {
  const Qwen3Shape s = moe_shape(ExpertLayout::PerExpert, true);
  const Qwen3Checkpoint ck = write_qwen3_checkpoint(s, "vlm_qwen3_moe_bad", 6);
  expect_refused(edited_copy(ck, "none",
                             [](std::map<std::string, TensorView>& t) {
                               std::erase_if(t, [](const auto& kv) {
                                 return kv.first.rfind("model.layers.2.mlp.experts.", 0) == 0;
                               });
                             }),
                 "neither model.layers.2.mlp.experts.gate_up_proj");
  std::vector<float> junk(static_cast<size_t>(s.E * s.C * s.C), 0.5f);
  expect_refused(edited_copy(ck, "shape",
                             [&](std::map<std::string, TensorView>& t) {
                               t["model.layers.0.mlp.experts.gate_up_proj"] =
                                   TensorView(junk.data(), DType::F32, Shape{s.E, s.C, s.C});
                             }),
                 "model.layers.0.mlp.experts.gate_up_proj has shape [8, 40, 40]");
  expect_refused(edited_copy(ck, "shared",
                             [&](std::map<std::string, TensorView>& t) {
                               t["model.layers.0.mlp.shared_expert.gate_proj.weight"] =
                                   TensorView(junk.data(), DType::F32, Shape{s.MI, s.C});
                             }),
                 "checkpoint tensor model.layers.0.mlp.shared_expert.gate_proj.weight is not read: layer 0 is a "
                 "mixture of 8 experts");
  // A router bias, per-expert quantization scales, a router on the layer mlp_only_layers keeps dense.
  expect_refused(edited_copy(ck, "bias",
                             [&](std::map<std::string, TensorView>& t) {
                               t["model.layers.2.mlp.gate.bias"] = TensorView(junk.data(), DType::F32, Shape{s.E});
                             }),
                 "checkpoint tensor model.layers.2.mlp.gate.bias is not read");
  expect_refused(edited_copy(ck, "scale",
                             [&](std::map<std::string, TensorView>& t) {
                               t["model.layers.0.mlp.experts.3.up_proj.weight_scale_inv"] =
                                   TensorView(junk.data(), DType::F32, Shape{1, 1});
                             }),
                 "checkpoint tensor model.layers.0.mlp.experts.3.up_proj.weight_scale_inv is not read");
  expect_refused(edited_copy(ck, "dense",
                             [&](std::map<std::string, TensorView>& t) {
                               t["model.layers.1.mlp.gate.weight"] = TensorView(junk.data(), DType::F32, Shape{s.E, s.C});
                             }),
                 "checkpoint tensor model.layers.1.mlp.gate.weight is not read: layer 1 is dense");
  std::filesystem::remove_all(ck.dir);
}

}  // namespace
}  // namespace vlm::testing
