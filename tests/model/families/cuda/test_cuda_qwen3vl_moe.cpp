// Qwen3-VL-MoE's decoder on the GPU against transformers 5.17 (tests/fixtures/qwen3vl_moe: the
// tiny Qwen3VLMoeForConditionalGeneration, 8 experts, top 2, layer 2 dense; skipped until made):
// each case (text, an image, a video, mixed) through a CudaDecoder built from the model's decoder
// (CudaLayers: the MoE layers on the GPU's MoE block, DeepStack planes added after the first
// layers by CudaRowOps::add_override_plane), media rows with their planes from the CPU's tower as
// host override rows, as testing::qwen3vl_run steps them (the CPU twin:
// tests/model/families/test_qwen3vl_moe_fixture.cpp):
//  - exact path (f32): every prompt row's logits <= 1e-4 relative to HF f32, whole prompt and in
//    7-token chunks cutting media runs, and the greedy continuation token for token (decode steps
//    as CUDA graphs);
//  - bf16: the MoE rule of tests/model/decoder/cuda/test_cuda_decoder_fixtures.cpp on every prompt
//    row against HF's own bf16 run (VLM_HF_BF16_DIR/qwen3_vl_moe_tiny.safetensors, written by
//    bench/gpu/hf_bf16_qwen3vl_moe.py; skipped otherwise): the median over cases of our max row
//    error / HF bf16's within 1.5, our worst within 1.5x HF bf16's worst, and the argmax of the
//    rows where HF bf16's top-2 margin exceeds 0.05 differing from HF bf16's on at most 1 in 10
//    (a routing flip moves a row by O(1) on either side). Our planes come from the f32 tower here
//    (the tower's bf16 closeness: CudaQwen3VLVision).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "model/decoder/cuda/cuda_decoder.h"
#include "model/families/qwen3_vl.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {
namespace {

std::string model_dir() { return std::string(VLM_FIXTURES_DIR) + "/qwen3vl_moe/qwen3_vl_moe_tiny"; }

// A CudaDecoder over the model's decoder with a cache of at least `blocks` blocks of 16.
std::unique_ptr<CudaDecoder> gpu_decoder(const Qwen3VLModel& model, DType dt, int64_t blocks) {
  CudaDecoderOptions o;
  o.dtype = dt;
  o.block_size = 16;
  o.num_kv_blocks = std::max<int64_t>(blocks, 64);
  o.max_tokens_per_step = 2048;
  o.max_logit_rows = 2048;
  return std::make_unique<CudaDecoder>(model.decoder(), o);
}

Qwen3VLStep step_on(CudaDecoder& gpu) {
  return [&gpu](const ForwardBatch& b, const EmbeddingOverride& ov, std::vector<float>& logits) {
    gpu.forward(b, ov);
    gpu.download_logits(logits);
  };
}

class CudaQwen3VLMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (!std::filesystem::exists(model_dir() + "/reference.safetensors"))
      GTEST_SKIP() << "fixture tests/fixtures/qwen3vl_moe not generated (tools/fixtures/make_qwen3_vl_moe_fixtures.py)";
    model_ = Qwen3VLModel::load(model_dir());
    ref_ = std::make_unique<Qwen3VLReference>(qwen3vl_reference(model_dir()));
    for (int k = 0; k < 8; ++k)
      if (ref_->has("p" + std::to_string(k) + ".logits")) cases_.push_back(k);
    ASSERT_EQ(cases_, (std::vector<int>{0, 1, 3, 4}));
    ASSERT_TRUE(model_->decoder().config().moe.enabled());
  }
  int64_t blocks(int k, int n) const {
    return qwen3vl_run_blocks(static_cast<int64_t>(ref_->ints("p" + std::to_string(k) + ".ids").size()), n);
  }
  std::unique_ptr<Qwen3VLModel> model_;
  std::unique_ptr<Qwen3VLReference> ref_;
  std::vector<int> cases_;
};

TEST_F(CudaQwen3VLMoe, ExactLogitsAndGreedyMatchHfWholeAndInChunks) {
  const int64_t V = model_->decoder().config().vocab_size;
  for (int k : cases_) {
    const std::string p = "p" + std::to_string(k);
    const auto want_greedy = ref_->ints(p + ".greedy");
    const auto want = ref_->floats(p + ".logits");  // [L, V]
    const int n = static_cast<int>(want_greedy.size());
    for (int chunk : {1000, 7}) {
      auto gpu = gpu_decoder(*model_, DType::F32, blocks(k, n));
      std::vector<float> rows;
      const auto got = qwen3vl_run(*model_, *ref_, k, chunk, n, rows, step_on(*gpu));
      EXPECT_EQ(got, want_greedy) << p << " chunk " << chunk;
      if (ref_->has(p + ".generate")) {
        EXPECT_EQ(got, ref_->ints(p + ".generate")) << p << " chunk " << chunk;
      }
      ASSERT_EQ(rows.size(), want.size()) << p;
      const double err = max_row_rel_error(rows.data(), want.data(), static_cast<int64_t>(want.size()) / V, V);
      EXPECT_LE(err, 1e-4) << p << " chunk " << chunk;
      std::printf("[ exact f32 ] qwen3_vl_moe_tiny %s chunk %d: max row rel error %.3g\n", p.c_str(), chunk, err);
      if (n > 1) {
        EXPECT_GT(gpu->graph_launches(), 0) << "decode steps ran eagerly";
      }
    }
  }
}

TEST_F(CudaQwen3VLMoe, Bf16IsAsCloseToHfF32AsHfBf16) {
  const char* dir = std::getenv("VLM_HF_BF16_DIR");
  if (dir == nullptr) GTEST_SKIP() << "VLM_HF_BF16_DIR not set (bench/gpu/hf_bf16_qwen3vl_moe.py writes it)";
  const std::string path = std::string(dir) + "/qwen3_vl_moe_tiny.safetensors";
  if (!std::ifstream(path)) GTEST_SKIP() << "no " << path;
  auto hf = SafetensorsFile::open(path);
  const int64_t V = model_->decoder().config().vocab_size;
  std::vector<double> ratios;
  double ours_max = 0, theirs_max = 0;
  int compared = 0, flips = 0;
  for (int k : cases_) {
    const std::string p = "p" + std::to_string(k);
    const auto want = ref_->floats(p + ".logits");  // HF f32, [L, V]
    const int64_t L = static_cast<int64_t>(want.size()) / V;
    const TensorView theirs_rows = hf->tensors().at(p + ".logits");  // HF bf16, [L, V] as f32
    ASSERT_EQ(theirs_rows.numel(), L * V) << p;
    auto gpu = gpu_decoder(*model_, DType::BF16, blocks(k, 1));
    std::vector<float> rows;
    qwen3vl_run(*model_, *ref_, k, 1000, 1, rows, step_on(*gpu));
    ASSERT_EQ(static_cast<int64_t>(rows.size()), L * V) << p;
    const float* t = theirs_rows.as<const float>();
    const double ours = max_row_rel_error(rows.data(), want.data(), L, V);
    const double theirs = max_row_rel_error(t, want.data(), L, V);
    std::printf("[ bf16 ] qwen3_vl_moe_tiny %s: ours %.4g, HF bf16 %.4g (ratio %.2f)\n", p.c_str(), ours, theirs,
                ours / theirs);
    ratios.push_back(ours / theirs);
    ours_max = std::max(ours_max, ours);
    theirs_max = std::max(theirs_max, theirs);
    for (int64_t r = 0; r < L; ++r) {  // every prompt row's argmax (fed the prompt: teacher-forced)
      const float* hr = t + r * V;
      const float* orow = rows.data() + r * V;
      const auto top = static_cast<int64_t>(std::max_element(hr, hr + V) - hr);
      float second = -1e30f;
      for (int64_t v = 0; v < V; ++v)
        if (v != top) second = std::max(second, hr[v]);
      if (hr[top] - second <= 0.05f) continue;
      ++compared;
      flips += (std::max_element(orow, orow + V) - orow) != top;
    }
  }
  std::sort(ratios.begin(), ratios.end());
  const double median = ratios[ratios.size() / 2];
  std::printf("[ bf16 ] qwen3_vl_moe_tiny (MoE): median ratio %.2f, worst ours %.4g vs HF bf16 %.4g; argmax differs "
              "on %d of %d rows with HF bf16 margin > 0.05\n", median, ours_max, theirs_max, flips, compared);
  EXPECT_LE(median, 1.5);
  EXPECT_LE(ours_max, 1.5 * theirs_max);
  EXPECT_GT(compared, 0);
  EXPECT_LE(10 * flips, compared);
}

}  // namespace
}  // namespace vlm::testing
