// Qwen3VLVisionTower (CpuLayers) against Hugging Face on the tiny Qwen3-VL fixture
// (tests/fixtures/qwen3vl/qwen3_vl_tiny, made by tools/fixtures/make_qwen3_vl_fixtures.py: f32
// compute on the stored bf16 weights): the merger and DeepStack planes of every case's images and
// videos, and the interpolated position table of case 1's first image on its own. Until the
// fixture is generated on the GPU machine these tests skip, saying so.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/arch/qwen3_vl_vision_tower.h"
#include "model/decoder/safetensors.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"
#include "tests/support/decoder_harness.h"

namespace vlm {
namespace {

using Grid = std::array<int32_t, 3>;

const std::string kDir = std::string(VLM_FIXTURES_DIR) + "/qwen3vl/qwen3_vl_tiny";

class Qwen3VLVisionFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kDir + "/reference.safetensors"))
      GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated yet: run tools/fixtures/make_qwen3_vl_fixtures.py "
                      "on the GPU machine (its header says how)";
    config_ = Qwen3VLConfig::load(kDir);
    store_ = std::make_unique<WeightStore>(WeightStore::open(kDir));
    // transformers 5.x saves the tower as model.visual.*; the released checkpoints as visual.*.
    prefix_ = store_->has("model.visual.patch_embed.proj.weight") ? "model.visual." : "visual.";
    ref_ = SafetensorsFile::open(kDir + "/reference.safetensors");
  }
  bool has(const std::string& n) const { return ref_->tensors().count(n) != 0; }
  std::vector<float> floats(const std::string& n) const {
    const TensorView& t = ref_->tensors().at(n);
    return std::vector<float>(t.as<const float>(), t.as<const float>() + t.numel());
  }
  std::vector<Grid> grids(const std::string& n) const {
    const TensorView& t = ref_->tensors().at(n);
    std::vector<Grid> g;
    for (int64_t i = 0; i + 2 < t.numel(); i += 3) g.push_back({t.as<const int32_t>()[i], t.as<const int32_t>()[i + 1], t.as<const int32_t>()[i + 2]});
    return g;
  }
  WeightSource weights() const { return WeightSource(*store_, prefix_); }

  Qwen3VLConfig config_;
  std::unique_ptr<WeightStore> store_;
  std::string prefix_;
  std::unique_ptr<SafetensorsFile> ref_;
};

TEST_F(Qwen3VLVisionFixture, ConfigIsTheTinyModel) {
  EXPECT_TRUE(config_.text.rope.mrope_interleaved);
  EXPECT_EQ(config_.text.rope.mrope_section, (std::vector<int>{6, 5, 5}));
  EXPECT_TRUE(config_.text.qk_norm);
  EXPECT_EQ(config_.vision.grid_side(), 8);
  EXPECT_EQ(config_.vision.deepstack_visual_indexes, (std::vector<int>{0, 1}));
}

TEST_F(Qwen3VLVisionFixture, MergerAndDeepStackPlanesMatchHf) {
  CpuLayers layers;
  const Qwen3VLVisionTower tower(config_.vision, layers, weights());
  const int64_t C = config_.vision.out_hidden_size, K = config_.vision.num_deepstack();
  int checked = 0;
  for (int k = 0; k < 10; ++k)
    for (const char* kind : {".image", ".video"}) {
      const std::string p = "p" + std::to_string(k) + kind;
      if (!has(p + "_pixels") || !has(p + "_embeds")) continue;
      const auto g = grids(p + "_grid");
      std::vector<float> px = floats(p + "_pixels");
      const Qwen3VLVisionLayout lay = qwen3_vl_vision_layout(config_.vision, g);
      const int64_t U = lay.num_patches / 4;
      ASSERT_EQ(static_cast<int64_t>(px.size()), lay.num_patches * config_.vision.patch_dim()) << p;
      std::vector<float> out(static_cast<size_t>((1 + K) * U * C));
      const ActivationPlan plan = tower.plan(lay);
      CpuStep step(plan, lay.num_patches);
      tower.forward(step, Act{px.data(), lay.num_patches, config_.vision.patch_dim(), DType::F32}, lay,
                    Act{out.data(), (1 + K) * U, C, DType::F32});
      const auto merged = floats(p + "_embeds");
      ASSERT_EQ(static_cast<int64_t>(merged.size()), U * C) << p;
      EXPECT_LE(testing::max_row_rel_error(out.data(), merged.data(), U, C), 1e-4) << p << " merger";
      if (has(p + "_deepstack")) {
        const auto deep = floats(p + "_deepstack");  // [K, U, C]: the planes' own layout
        ASSERT_EQ(static_cast<int64_t>(deep.size()), K * U * C) << p;
        EXPECT_LE(testing::max_row_rel_error(out.data() + U * C, deep.data(), K * U, C), 1e-4) << p << " DeepStack";
      }
      ++checked;
    }
  EXPECT_GE(checked, 4);  // cases 1-4 hold images or videos
}

TEST_F(Qwen3VLVisionFixture, InterpolatedPositionsMatchHf) {
  if (!has("v.pos_embed")) GTEST_SKIP() << "the fixture run recorded no v.pos_embed (see its summary.json)";
  const Grid g = grids("p1.image_grid").at(0);
  const int64_t P = int64_t{g[0]} * g[1] * g[2], Cv = config_.vision.hidden_size;
  CpuLayers layers;
  const auto pos = layers.position_table(weights(), qwen3_vl_vision_position_spec(config_.vision));
  std::vector<float> x(static_cast<size_t>(P * Cv), 0.0f);
  ActivationPlan plan;
  CpuStep step(plan, P);
  const std::vector<Grid> one = {g};
  pos->add(step, one, Act{x.data(), P, Cv, DType::F32});
  const auto want = floats("v.pos_embed");
  ASSERT_EQ(want.size(), x.size());
  EXPECT_LE(testing::max_row_rel_error(x.data(), want.data(), P, Cv), 1e-6);
}

}  // namespace
}  // namespace vlm
