// The GPU preprocessing of Frames8 items (model/vision/cuda/cuda_frame_preprocessor.h) against
// the CPU reference (qwen2vl_frames_rows = qwen2vl_preprocess): rows bit-identical in f32 (the
// resized 8-bit values equal, the normalize table shared) and equal to the CPU rows rounded once
// in bf16, for several sizes (no resize, both passes, one axis, upscaled), odd frame counts and
// slices of temporal groups, on random frames and real decoded video frames; and the full encode
// of a small video through CudaMediaEncoder (eager and in lazy whole-frame units) equals the
// Rows form's embeddings (f32 and bf16; the inputs are identical, so within 1e-6).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>

#include "engine/cuda/cuda_media_encoder.h"
#include "kernels/core/check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/families/qwen2_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/video_decode.h"
#include "model/vision/cuda/cuda_frame_preprocessor.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_image.h"

namespace vlm::testing {
namespace {

const std::string kFix = VLM_FIXTURES_DIR;

std::vector<RgbImage> clip_frames(const char* clip, int n) {
  std::ifstream in(kFix + "/video/" + clip, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decode_video(bytes, VideoLimits{}, [n](const VideoInfo& info) {
           std::vector<int64_t> pick;
           for (int64_t i = 0; i < std::min<int64_t>(info.num_frames, n); ++i) pick.push_back(i);
           return pick;
         }).frames;
}

void expect_gpu_rows_match(CudaFramePreprocessor& pre, const MediaPixels& m) {
  const int64_t per_t = static_cast<int64_t>(m.grid_thw[1]) * m.grid_thw[2] * m.preprocess.patch_dim();
  const std::vector<float> want = qwen2vl_frames_rows(m, 0, m.grid_thw[0]);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    // The whole item, then each temporal group alone (as encode units ask).
    cuda::DeviceBuffer out(want.size() * dtype_size(dt));
    pre.rows(m, 0, m.grid_thw[0], out.get(), dt, nullptr);
    const std::vector<uint8_t> expect = encode(want, dt);
    std::vector<uint8_t> got = to_host<uint8_t>(out, expect.size());
    if (dt == DType::F32) {  // where they differ, say by how much (levels before normalization)
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

TEST(CudaFramePreprocessor, RowsEqualTheCpuReference) {
  VLM_REQUIRE_GPU();
  CudaFramePreprocessor pre;
  pre.reserve(2);
  EXPECT_EQ(pre.reserved_bytes(), CudaFramePreprocessor::workspace_bytes(2));
  std::mt19937 g(21);
  struct Case {
    int w, h, frames;
    int64_t min_pixels, max_pixels;
  };
  for (const Case& c : {Case{84, 56, 3, 3136, 1003520}, Case{85, 57, 3, 3136, 1003520}, Case{84, 57, 1, 3136, 1003520},
                        Case{83, 56, 5, 3136, 1003520}, Case{448, 448, 4, 3136, 1003520},
                        Case{640, 360, 2, 3136, 200704}, Case{30, 20, 3, 12544, 1003520}}) {
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " x" + std::to_string(c.frames));
    std::vector<RgbImage> frames;
    for (int i = 0; i < c.frames; ++i) frames.push_back(random_image(c.w, c.h, g));
    Qwen2VLPreprocessConfig cfg;
    cfg.min_pixels = c.min_pixels;
    cfg.max_pixels = c.max_pixels;
    expect_gpu_rows_match(pre, qwen2vl_frames8(frames, cfg, Modality::Video));
  }
  for (const char* clip : {"h264.mp4", "vp9.webm"}) {  // real frames: 64x48 -> 56x56, 5 frames
    SCOPED_TRACE(clip);
    expect_gpu_rows_match(pre, qwen2vl_frames8(clip_frames(clip, 5), Qwen2VLPreprocessConfig{}, Modality::Video));
  }
}

// A small video (7 frames 85x57 -> 84x56, last frame repeated) and an image, encoded through the
// media encoder as Frames8 and as Rows.
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

TEST(CudaFramePreprocessor, MediaEncoderEmbeddingsEqualTheRowsPath) {
  VLM_REQUIRE_GPU();
  std::mt19937 g(4);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 7; ++i) frames.push_back(random_image(85, 57, g));
  const MediaPixels video = qwen2vl_frames8(frames, Qwen2VLPreprocessConfig{}, Modality::Video);
  const MediaPixels image = qwen2vl_frames8({random_image(100, 70, g)}, Qwen2VLPreprocessConfig{}, Modality::Image);
  const std::vector<MediaPixels> f8 = {image, video}, rows = {to_rows_form(image), to_rows_form(video)};
  for (const char* fixture : {"qwen2_vl_tiny", "qwen2_5_vl_tiny"}) {
    const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/" + fixture);
    for (int k = 0; k < 2; ++k) {  // the model accepts both forms with the same tokens
      EXPECT_EQ(model->media_tokens(f8[static_cast<size_t>(k)], k), model->media_tokens(rows[static_cast<size_t>(k)], k));
    }
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t step : {int64_t(0), int64_t(24)}) {  // eager; lazy units of one temporal group (6x4 patches)
        SCOPED_TRACE(std::string(fixture) + " " + dtype_name(dt) + " step_patches " + std::to_string(step));
        auto enc = CudaMediaEncoder::make(*model, dt, 4096, step);
        const std::vector<float> a = encode_items(*enc, f8), b = encode_items(*enc, rows);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_LE(rel_error(a, b), 1e-6);
        // The CPU tower on the same rows (the existing vision tests' bounds).
        std::vector<float> cpu(a.size());
        std::vector<const MediaPixels*> ptrs = {&f8[0], &f8[1]};
        model->encode_media(ptrs, cpu.data());
        EXPECT_LE(rel_error(a, cpu), dt == DType::F32 ? 1e-4 : 2e-2);
      }
  }
}

}  // namespace
}  // namespace vlm::testing
