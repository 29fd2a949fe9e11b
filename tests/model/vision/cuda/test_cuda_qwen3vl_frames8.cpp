// Qwen3-VL's Frames8 items on the GPU (model/vision/cuda/cuda_frame_preprocessor.h through
// CudaQwen3VLVisionRunner): the GPU rows equal the CPU reference (qwen2vl_frames_rows, itself
// bit-equal to qwen3vl_preprocess_video: tests/model/media/test_qwen3vl_frames8.cpp) bit for bit in
// f32 and as the CPU rows rounded once in bf16, for Qwen3-VL's patch 16 / mean-std 0.5 and its
// video resize targets (down, up, one axis, none, odd frame counts), whole, per temporal group and
// per split group; and the encode through CudaMediaEncoder of the fixture's real media (each case's
// images and video groups) as Frames8 equals the Rows form's embeddings (f32 and bf16; identical
// inputs) and the CPU tower's. Skips without a GPU (and the fixture tests without the fixture).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/cuda/cuda_media_encoder.h"
#include "kernels/core/check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/families/qwen3_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/qwen3vl_video.h"
#include "model/vision/cuda/cuda_frame_preprocessor.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/random_image.h"

namespace vlm::testing {
namespace {

Qwen3VLVideoConfig video_config(int64_t min_pixels, int64_t max_pixels) {
  Qwen3VLVideoConfig c;
  c.base.patch_size = 16;
  c.base.min_pixels = min_pixels;
  c.base.max_pixels = max_pixels;
  c.base.mean = {0.5f, 0.5f, 0.5f};
  c.base.std = {0.5f, 0.5f, 0.5f};
  return c;
}

void expect_gpu_rows_match(CudaFramePreprocessor& pre, const MediaPixels& m) {
  const int64_t per_t = static_cast<int64_t>(m.grid_thw[1]) * m.grid_thw[2] * m.preprocess.patch_dim();
  const std::vector<float> want = qwen2vl_frames_rows(m, 0, m.grid_thw[0]);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    cuda::DeviceBuffer out(want.size() * dtype_size(dt));
    pre.rows(m, 0, m.grid_thw[0], out.get(), dt, nullptr);
    const std::vector<uint8_t> expect = encode(want, dt);
    std::vector<uint8_t> got = to_host<uint8_t>(out, expect.size());
    if (dt == DType::F32) {
      const std::vector<float> g = decode(got, dt);
      double worst = 0;
      for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(double(g[i]) - want[i]));
      EXPECT_EQ(worst, 0.0) << "largest difference of a normalized value";
    }
    EXPECT_EQ(got, expect) << "the whole item";
    for (int32_t t = 0; t < m.grid_thw[0]; ++t) {
      pre.rows(m, t, t + 1, out.get(), dt, nullptr);
      got = to_host<uint8_t>(out, static_cast<size_t>(per_t) * dtype_size(dt));
      EXPECT_EQ(std::memcmp(got.data(), expect.data() + static_cast<size_t>(t * per_t) * dtype_size(dt), got.size()), 0)
          << "group " << t;
    }
  }
}

TEST(CudaQwen3VLFrames8, GpuRowsEqualTheCpuRows) {
  VLM_REQUIRE_GPU();
  CudaFramePreprocessor pre;
  pre.reserve(2);
  std::mt19937 g(43);
  struct Case {
    int w, h, frames;
    int64_t max_pixels;
  };
  for (const Case& c : {Case{70, 50, 3, 49152},       // up to 64x64
                        Case{320, 240, 8, 49152},     // down, both axes
                        Case{130, 100, 5, 49152},     // 96x128, odd count
                        Case{64, 70, 2, 49152},       // one axis
                        Case{96, 64, 7, 1 << 20},     // no resize, odd count
                        Case{448, 448, 4, 12845056},  // the long-video bench's frames: no resize
                        Case{640, 360, 4, 1 << 20}}) {  // a 16:9 frame resized down
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " x" + std::to_string(c.frames));
    std::vector<RgbImage> frames;
    for (int i = 0; i < c.frames; ++i) frames.push_back(random_image(c.w, c.h, g));
    const Qwen3VLVideoConfig cfg = video_config(4096, c.max_pixels);
    const MediaPixels video = qwen3vl_video_frames8(frames, cfg);
    ASSERT_TRUE(same_bits(qwen2vl_frames_rows(video, 0, video.grid_thw[0]), qwen3vl_preprocess_video(frames, cfg).pixels));
    expect_gpu_rows_match(pre, video);
    for (const MediaPixels& grp : qwen3vl_split_video(video, 2)) expect_gpu_rows_match(pre, grp);  // the engine's items
    expect_gpu_rows_match(pre, qwen2vl_frames8({frames[0]}, cfg.base, Modality::Image));  // an image, 16-px
  }
}

std::vector<float> encode_items(CudaMediaEncoder& enc, const std::vector<MediaPixels>& items) {
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  const auto e = enc.encode(ptrs, {}, nullptr);
  e->ensure_rows(0, e->rows);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(static_cast<size_t>(e->rows * enc.tower().out_features()));
  VLM_CUDA_CHECK(cudaMemcpy(out.data(), e->data, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

TEST(CudaQwen3VLFrames8, MediaEncoderEmbeddingsEqualTheRowsPath) {
  VLM_REQUIRE_GPU();
  if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
  const auto model = Qwen3VLModel::load(qwen3vl_model_dir());
  const Qwen3VLReference ref = qwen3vl_reference();
  int cases = 0;
  for (int k = 0; ref.has("p" + std::to_string(k) + ".ids"); ++k) {
    const Qwen3VLPromptItems pi = qwen3vl_frames8_items(*model, ref, k);
    if (pi.items.empty()) continue;
    ++cases;
    std::vector<MediaPixels> rows;
    for (const MediaPixels& m : pi.items) {
      ASSERT_TRUE(m.is_frames8());
      rows.push_back(to_rows_form(m));
    }
    std::vector<const MediaPixels*> ptrs;
    for (const MediaPixels& m : pi.items) ptrs.push_back(&m);
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE("p" + std::to_string(k) + " " + dtype_name(dt));
      auto enc = CudaMediaEncoder::make(*model, dt, 4096, 0);
      const std::vector<float> a = encode_items(*enc, pi.items), b = encode_items(*enc, rows);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_LE(rel_error(a, b), 1e-6) << "Frames8 vs Rows: the same tower input";
      std::vector<float> cpu(a.size());
      model->encode_media(ptrs, cpu.data());
      EXPECT_LE(rel_error(a, cpu), dt == DType::F32 ? 1e-4 : 2e-2);
    }
  }
  EXPECT_GE(cases, 4);
}

}  // namespace
}  // namespace vlm::testing
