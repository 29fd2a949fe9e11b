// Qwen3-VL-MoE against transformers 5.17 (tests/fixtures/qwen3vl_moe, made by
// tools/fixtures/make_qwen3_vl_moe_fixtures.py on the GPU machine; skipped until then): a tiny
// random Qwen3VLMoeForConditionalGeneration (8 experts, top 2, layer 2 dense through
// mlp_only_layers) on the prompts and pixels of the dense fixture: text, an image, a video, mixed.
// M-RoPE positions exact, the tower's planes <= 1e-4, logits <= 1e-4 relative and greedy tokens
// exact whole and in 7-token chunks that cut media runs; the same weights with the experts in the
// other layout (qwen3_vl_moe_tiny_relayout) give the same logits bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "model/families/architecture.h"
#include "model/families/qwen3_vl.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm {
namespace {

std::string fixture_dir() { return std::string(VLM_FIXTURES_DIR) + "/qwen3vl_moe"; }
std::string model_dir() { return fixture_dir() + "/qwen3_vl_moe_tiny"; }
std::string relayout_dir() { return fixture_dir() + "/qwen3_vl_moe_tiny_relayout"; }

#define SKIP_WITHOUT_FIXTURE()                                                                                 \
  if (!std::filesystem::exists(model_dir() + "/reference.safetensors"))                                      \
  GTEST_SKIP() << "fixture tests/fixtures/qwen3vl_moe not generated yet: on the GPU machine run "            \
                  "python3 tools/fixtures/make_qwen3_vl_moe_fixtures.py --out $OUT/q3vlmoe --tokenizer "      \
                  "tests/data/tokenizers/qwen3, then tar -C tests/fixtures -xzf "                             \
                  "<files_at>/q3vlmoe/qwen3vl_moe_fixtures.tar.gz"

struct Fixture {
  explicit Fixture(const std::string& dir = model_dir()) : model(Qwen3VLModel::load(dir)) {}
  std::unique_ptr<Qwen3VLModel> model;
  testing::Qwen3VLReference ref = testing::qwen3vl_reference(model_dir());
  std::vector<int> cases() const {  // the dense fixture's case numbers the run made
    std::vector<int> out;
    for (int k = 0; k < 8; ++k)
      if (ref.has("p" + std::to_string(k) + ".logits")) out.push_back(k);
    return out;
  }
};

TEST(Qwen3VLMoeFixture, ConfigAndSparseLayers) {
  SKIP_WITHOUT_FIXTURE();
  EXPECT_EQ(detect_architecture(model_dir()), ModelArchitecture::Qwen3VL);
  Fixture f;
  const ModelConfig& tc = f.model->decoder().config();
  EXPECT_EQ(tc.architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(tc.moe.num_experts, 8);
  EXPECT_EQ(tc.moe.top_k, 2);
  EXPECT_EQ(tc.moe.intermediate_size, 48);
  EXPECT_TRUE(tc.moe.norm_topk_prob);
  EXPECT_TRUE(tc.rope.mrope_interleaved);
  EXPECT_EQ(tc.deepstack_layers, 2);
  for (int64_t l = 0; l < tc.num_layers; ++l) EXPECT_EQ(tc.moe.is_moe_layer(l), l != 2) << l;
  EXPECT_EQ(f.cases(), (std::vector<int>{0, 1, 3, 4}));
}

TEST(Qwen3VLMoeFixture, RopePositionsAndTowerPlanesMatchHf) {
  SKIP_WITHOUT_FIXTURE();
  Fixture f;
  for (int k : f.cases()) {
    const std::string p = "p" + std::to_string(k);
    const auto ids = f.ref.ints(p + ".ids");
    const auto items = testing::qwen3vl_prompt_items(*f.model, f.ref, k);
    const MropePositions pos = *f.model->mrope_positions(ids, items.items);
    const size_t L = ids.size();
    std::vector<int32_t> got(3 * L);
    for (size_t i = 0; i < L; ++i)
      for (size_t a = 0; a < 3; ++a) got[a * L + i] = pos.positions[i * 3 + a];
    EXPECT_EQ(got, f.ref.ints(p + ".rope_positions")) << p;
    if (f.ref.has(p + ".positions")) EXPECT_EQ(got, f.ref.ints(p + ".positions")) << p;
    for (const std::string kind : {".image", ".video"}) {
      if (!f.ref.has(p + kind + "_embeds")) continue;
      const int64_t C = 64, planes = f.model->embedding_planes(), W = planes * C;
      const auto px = f.ref.floats(p + kind + "_pixels");
      const auto merged = f.ref.floats(p + kind + "_embeds"), deep = f.ref.floats(p + kind + "_deepstack");
      const int64_t U = static_cast<int64_t>(merged.size()) / C;
      std::vector<float> out(static_cast<size_t>(U * W)), plane(static_cast<size_t>(U * C));
      f.model->encode(px.data(), f.ref.grids(p + kind + "_grid"), out.data());
      for (int64_t pl = 0; pl < planes; ++pl) {
        for (int64_t u = 0; u < U; ++u) std::copy_n(out.data() + u * W + pl * C, C, plane.data() + u * C);
        const float* want = pl == 0 ? merged.data() : deep.data() + (pl - 1) * U * C;
        EXPECT_LE(testing::max_row_rel_error(plane.data(), want, U, C), 1e-4) << p << kind << " plane " << pl;
      }
    }
  }
}

TEST(Qwen3VLMoeFixture, LogitsAndGreedyMatchHfWholeAndInChunks) {
  SKIP_WITHOUT_FIXTURE();
  Fixture f;
  const int64_t V = f.model->decoder().config().vocab_size;
  ASSERT_FALSE(f.cases().empty());
  for (int k : f.cases()) {
    const std::string p = "p" + std::to_string(k);
    const auto want_greedy = f.ref.ints(p + ".greedy");
    const auto want = f.ref.floats(p + ".logits");  // [L, V]
    for (int chunk : {1000, 7}) {
      std::vector<float> rows;
      const auto got = testing::qwen3vl_run(*f.model, f.ref, k, chunk, static_cast<int>(want_greedy.size()), rows);
      EXPECT_EQ(got, want_greedy) << p << " chunk " << chunk;
      if (f.ref.has(p + ".generate")) EXPECT_EQ(got, f.ref.ints(p + ".generate")) << p << " chunk " << chunk;
      ASSERT_EQ(rows.size(), want.size()) << p;
      const double err = testing::max_row_rel_error(rows.data(), want.data(), static_cast<int64_t>(want.size()) / V, V);
      EXPECT_LE(err, 1e-4) << p << " chunk " << chunk;
      std::printf("%s chunk %d: max row relative error %.2e\n", p.c_str(), chunk, err);
    }
  }
}

TEST(Qwen3VLMoeFixture, TheOtherExpertLayoutGivesTheSameLogitsBitForBit) {
  SKIP_WITHOUT_FIXTURE();
  if (!std::filesystem::exists(relayout_dir() + "/model.safetensors"))
    GTEST_SKIP() << "the fixture run made no relayout (its log says why)";
  Fixture a, b(relayout_dir());
  for (int k : a.cases()) {
    std::vector<float> ra, rb;
    const auto ga = testing::qwen3vl_run(*a.model, a.ref, k, 7, 4, ra);
    const auto gb = testing::qwen3vl_run(*b.model, b.ref, k, 7, 4, rb);
    EXPECT_EQ(ra, rb) << "p" << k;
    EXPECT_EQ(ga, gb) << "p" << k;
  }
}

}  // namespace
}  // namespace vlm
