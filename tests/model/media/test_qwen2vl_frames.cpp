// The Frames8 form (model/media/qwen2vl_frames.h): its CPU reference rows equal today's
// qwen2vl_preprocess rows bit for bit, whole and per temporal-group slice, on real decoded video
// frames (tests/fixtures/video) and on random frames of odd sizes that resize (down and up), with
// frame counts that are not a multiple of the temporal patch (the last frame repeated); the item's
// size, grid and frame count are qwen2vl_preprocess's; frames8_fit's bounds; the CPU model
// (Qwen2VLModel) takes a Frames8 item with the Rows item's tokens and embeddings, and refuses one
// whose frames do not match its grid with a 400.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "kernels/core/check.h"
#include "model/families/qwen2_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/video_decode.h"
#include "tests/support/random_image.h"

namespace vlm {
namespace {

// frames as Frames8 against qwen2vl_preprocess_ref and qwen2vl_preprocess of the same frames.
void expect_rows_match(const std::vector<RgbImage>& frames, const Qwen2VLPreprocessConfig& cfg, Modality modality) {
  const VisionPatches want = qwen2vl_preprocess_ref(frames, cfg);
  ASSERT_TRUE(same_bits(want.pixels, qwen2vl_preprocess(frames, cfg).pixels));
  const MediaPixels m = qwen2vl_frames8(frames, cfg, modality);
  ASSERT_TRUE(m.is_frames8());
  EXPECT_TRUE(m.data.empty());
  EXPECT_EQ(m.grid_thw, want.grid_thw);
  EXPECT_EQ(m.height, want.grid_thw[1] * cfg.patch_size);
  EXPECT_EQ(m.width, want.grid_thw[2] * cfg.patch_size);
  EXPECT_EQ(m.num_frames, modality == Modality::Video ? static_cast<int32_t>(frames.size()) : 0);
  EXPECT_TRUE(same_bits(qwen2vl_frames_rows(m, 0, m.grid_thw[0]), want.pixels)) << "whole item";
  const MediaPixels rows = to_rows_form(m);
  EXPECT_FALSE(rows.is_frames8());
  EXPECT_TRUE(same_bits(rows.data, want.pixels));
  EXPECT_EQ(rows.grid_thw, want.grid_thw);
  // Every slice of temporal groups is its rows of the whole.
  const int64_t per_t = static_cast<int64_t>(want.grid_thw[1]) * want.grid_thw[2] * cfg.patch_dim();
  for (int32_t t0 = 0; t0 < m.grid_thw[0]; ++t0)
    for (int32_t t1 = t0 + 1; t1 <= m.grid_thw[0]; ++t1) {
      const std::vector<float> part = qwen2vl_frames_rows(m, t0, t1);
      ASSERT_EQ(static_cast<int64_t>(part.size()), (t1 - t0) * per_t);
      EXPECT_EQ(std::memcmp(part.data(), want.pixels.data() + t0 * per_t, part.size() * sizeof(float)), 0)
          << "groups " << t0 << ".." << t1;
    }
}

TEST(Qwen2VLFrames8, RealVideoFramesGiveTodaysRows) {
  for (const char* clip : {"h264.mp4", "vp9.webm"}) {
    std::ifstream in(std::string(VLM_FIXTURES_DIR) + "/video/" + clip, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(bytes.empty()) << clip;
    const DecodedVideo v = decode_video(bytes, VideoLimits{}, [](const VideoInfo& info) {
      std::vector<int64_t> pick;
      for (int64_t i = 0; i < std::min<int64_t>(info.num_frames, 5); ++i) pick.push_back(i);  // 5: odd
      return pick;
    });
    ASSERT_EQ(v.frames.size(), 5u) << clip;
    Qwen2VLPreprocessConfig keep, down, up;
    down.max_pixels = 4 * 28 * 28;          // shrink to a few patches
    up.min_pixels = 2 * v.frames[0].width * v.frames[0].height;  // grow
    for (const Qwen2VLPreprocessConfig& cfg : {keep, down, up}) {
      SCOPED_TRACE(std::string(clip) + " max_pixels " + std::to_string(cfg.max_pixels) + " min_pixels " +
                   std::to_string(cfg.min_pixels));
      expect_rows_match(v.frames, cfg, Modality::Video);
      expect_rows_match({v.frames[2]}, cfg, Modality::Image);
    }
  }
}

TEST(Qwen2VLFrames8, OddSizesAndCountsGiveTodaysRows) {
  std::mt19937 g(11);
  struct Case {
    int w, h, frames;
    int64_t min_pixels, max_pixels;
  };
  const Case cases[] = {
      {84, 56, 3, 56 * 56, 28 * 28 * 1280},   // already multiples of 28: no resize
      {85, 57, 3, 56 * 56, 28 * 28 * 1280},   // odd: both passes
      {84, 57, 1, 56 * 56, 28 * 28 * 1280},   // the vertical pass alone
      {83, 56, 5, 56 * 56, 28 * 28 * 1280},   // the horizontal pass alone
      {200, 30, 2, 56 * 56, 28 * 28 * 4},     // downscaled under max_pixels
      {30, 20, 4, 112 * 112, 28 * 28 * 1280}, // upscaled to min_pixels
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " x" + std::to_string(c.frames));
    std::vector<RgbImage> frames;
    for (int i = 0; i < c.frames; ++i) frames.push_back(random_image(c.w, c.h, g));
    Qwen2VLPreprocessConfig cfg;
    cfg.min_pixels = c.min_pixels;
    cfg.max_pixels = c.max_pixels;
    expect_rows_match(frames, cfg, Modality::Video);
  }
}

TEST(Qwen2VLFrames8, RefusesWhatThePreprocessingRefuses) {
  std::mt19937 g(3);
  EXPECT_THROW(qwen2vl_frames8({}, Qwen2VLPreprocessConfig{}, Modality::Video), RequestError);
  EXPECT_THROW(qwen2vl_frames8({random_image(56, 56, g), random_image(84, 56, g)}, Qwen2VLPreprocessConfig{},
                               Modality::Video),
               RequestError);
  EXPECT_THROW(qwen2vl_frames8({random_image(5, 56, g)}, Qwen2VLPreprocessConfig{}, Modality::Image), RequestError);
  MediaPixels rows;
  EXPECT_THROW(qwen2vl_frames_rows(rows, 0, 1), InternalError) << "a Rows item has no frames";
}

TEST(Qwen2VLFrames8, FitBounds) {
  EXPECT_TRUE(frames8_fit(448, 448, 448, 448));
  EXPECT_TRUE(frames8_fit(2560, 1440, 1288, 728));
  EXPECT_FALSE(frames8_fit(3840, 2160, 1288, 728)) << "a 4K frame is over 4 Mi pixels";
  EXPECT_FALSE(frames8_fit(9000, 100, 448, 28)) << "a side over kFrames8MaxSide";
  EXPECT_FALSE(frames8_fit(100, 8000, 4000, 28)) << "the horizontal pass's intermediate (4000 x 8000)";
  EXPECT_FALSE(frames8_fit(0, 10, 28, 28));
}

TEST(Qwen2VLFrames8, CpuModelEncodesItAsTheRows) {
  const auto model = Qwen2VLModel::load(std::string(VLM_FIXTURES_DIR) + "/qwen2vl/qwen2_vl_tiny");
  std::mt19937 g(8);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 3; ++i) frames.push_back(random_image(85, 57, g));
  const MediaPixels f8 = qwen2vl_frames8(frames, Qwen2VLPreprocessConfig{}, Modality::Video);
  const MediaPixels rows = to_rows_form(f8);
  ASSERT_EQ(model->media_tokens(f8, 0), model->media_tokens(rows, 0));
  const int64_t n = model->media_tokens(rows, 0), C = model->config().text.hidden_size;
  std::vector<float> a(static_cast<size_t>(2 * n * C)), b(a.size());
  const MediaPixels* both_f8[] = {&f8, &rows};  // mixed forms in one call
  const MediaPixels* both_rows[] = {&rows, &rows};
  model->encode_media(both_f8, a.data());
  model->encode_media(both_rows, b.data());
  EXPECT_TRUE(same_bits(a, b));
  MediaPixels bad = f8;
  bad.grid_thw[0] = 3;  // 3 frames are 2 temporal groups
  EXPECT_THROW(model->media_tokens(bad, 1), RequestError);
  bad = f8;
  bad.frames.pop_back();
  bad.frames.pop_back();  // 1 frame: 1 group
  EXPECT_THROW(model->media_tokens(bad, 1), RequestError);
}

}  // namespace
}  // namespace vlm
