// The Qwen3-VL vision tower on the GPU (CudaQwen3VLVisionRunner over CudaLayers, picked by
// CudaMediaEncoder for a Qwen3VLModel) against the CPU model's encode on the fixture
// (tests/fixtures/qwen3vl: the tiny model, every case's images and video temporal groups as the
// engine takes them): each row's merger plane and K DeepStack planes side by side, within 1e-4
// relative in f32 and 2e-2 in bf16, every plane checked apart (a wrong DeepStack merger shows by
// its index); an item beyond the reservation is refused with a 400 at admission. Skips without a
// GPU or without the fixture.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/cuda/cuda_media_encoder.h"
#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/families/qwen3_vl.h"
#include "model/vision/cuda/cuda_qwen3_vl_vision_runner.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {
namespace {

// Columns [p C, (p + 1) C) of rows [U, planes * C].
std::vector<float> plane_of(const std::vector<float>& rows, int64_t planes, int64_t C, int64_t p) {
  const auto U = static_cast<int64_t>(rows.size()) / (planes * C);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(U * C));
  for (int64_t u = 0; u < U; ++u)
    out.insert(out.end(), rows.begin() + (u * planes + p) * C, rows.begin() + (u * planes + p + 1) * C);
  return out;
}

class CudaQwen3VLVision : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
    model_ = Qwen3VLModel::load(qwen3vl_model_dir());
    ref_ = std::make_unique<Qwen3VLReference>(qwen3vl_reference());
  }
  std::unique_ptr<Qwen3VLModel> model_;
  std::unique_ptr<Qwen3VLReference> ref_;
};

TEST_F(CudaQwen3VLVision, PlanesMatchTheCpuModelsEncode) {
  const int64_t C = model_->config().vision.out_hidden_size, planes = model_->embedding_planes();
  ASSERT_GT(planes, 1) << "the fixture has no DeepStack mergers";
  int cases = 0;
  for (int k = 0; ref_->has("p" + std::to_string(k) + ".ids"); ++k) {
    const Qwen3VLPromptItems pi = qwen3vl_prompt_items(*model_, *ref_, k);
    if (pi.items.empty()) continue;  // text only
    ++cases;
    std::vector<const MediaPixels*> ptrs;
    int64_t rows = 0;
    for (size_t i = 0; i < pi.items.size(); ++i) {
      ptrs.push_back(&pi.items[i]);
      rows += model_->media_tokens(pi.items[i], static_cast<int>(i));
    }
    std::vector<float> cpu(static_cast<size_t>(rows * planes * C));
    model_->encode_media(ptrs, cpu.data());
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE("p" + std::to_string(k) + " " + dtype_name(dt));
      const auto enc = CudaMediaEncoder::make(*model_, dt, 16384, 0);
      ASSERT_NE(enc, nullptr);
      ASSERT_NE(dynamic_cast<const CudaQwen3VLVisionRunner*>(&enc->tower()), nullptr);
      ASSERT_EQ(enc->tower().out_features(), planes * C);
      for (size_t i = 0; i < pi.items.size(); ++i) ASSERT_NO_THROW(enc->check(pi.items[i], static_cast<int>(i)));
      const auto e = enc->encode(ptrs, {}, nullptr);
      ASSERT_EQ(e->rows, rows);
      e->ensure_rows(0, e->rows);
      VLM_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> got(cpu.size());
      VLM_CUDA_CHECK(cudaMemcpy(got.data(), e->data, got.size() * 4, cudaMemcpyDeviceToHost));
      const double tol = dt == DType::F32 ? 1e-4 : 2e-2;
      for (int64_t p = 0; p < planes; ++p) {
        const double err = rel_error(plane_of(got, planes, C, p), plane_of(cpu, planes, C, p));
        std::printf("[ gpu vision ] qwen3-vl p%d %s plane %lld: rel error %.3g against the CPU\n", k, dtype_name(dt),
                    static_cast<long long>(p), err);
        EXPECT_LE(err, tol) << "plane " << p << (p == 0 ? " (the merger's)" : " (DeepStack)");
      }
    }
  }
  EXPECT_GE(cases, 4);  // one image, two images, a video, image + video + image (+ the video file)
}

TEST_F(CudaQwen3VLVision, AnItemBeyondTheReservationIsA400) {
  Qwen3VLPromptItems pi;
  for (int k = 0; pi.items.empty() && ref_->has("p" + std::to_string(k) + ".ids"); ++k)
    pi = qwen3vl_prompt_items(*model_, *ref_, k);
  ASSERT_FALSE(pi.items.empty());
  const MediaPixels& item = pi.items[0];
  const int64_t P = int64_t{item.grid_thw[0]} * item.grid_thw[1] * item.grid_thw[2];
  const auto fits = CudaMediaEncoder::make(*model_, DType::BF16, P, 0);
  EXPECT_NO_THROW(fits->check(item, 0));
  const auto small = CudaMediaEncoder::make(*model_, DType::BF16, P - 1, 0);
  try {
    small->check(item, 0);
    FAIL() << "an item of " << P << " patches passed a reservation of " << P - 1;
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("--max-media-patches"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vlm::testing
