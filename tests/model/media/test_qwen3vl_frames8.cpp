// Qwen3-VL's videos in the Frames8 form (model/media/qwen3vl_video.h: qwen3vl_video_frames8; the
// CUDA backend's form, model/media/qwen2vl_frames.h): the CPU reference rows (qwen2vl_frames_rows)
// equal today's rows (qwen3vl_preprocess_video) bit for bit, and an independent plain path
// (resize_bicubic_ref per frame, then qwen2vl_preprocess_ref at that size), on random frames that
// resize down, up, along one axis or not at all, with odd frame counts and Qwen3-VL's patch 16 /
// mean-std 0.5; qwen3vl_split_video of a Frames8 video gives Frames8 groups whose rows are the
// Rows form's groups', with the same metadata; and the CPU model (Qwen3VLModel) takes Frames8
// items (the fixture's real video and image frames) with the Rows items' tokens and bit-equal
// embeddings, and refuses Frames8 items that do not give their grid with a 400.
#include <gtest/gtest.h>

#include <random>

#include "kernels/core/check.h"
#include "model/decoder/safetensors.h"
#include "model/families/qwen3_vl.h"
#include "model/media/image_preprocess.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/qwen3vl_video.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/random_image.h"

namespace vlm {
namespace {

// Qwen3-VL's processor settings (the released checkpoints' shape, small budgets).
Qwen3VLVideoConfig video_config(int64_t min_pixels, int64_t max_pixels) {
  Qwen3VLVideoConfig c;
  c.base.patch_size = 16;
  c.base.merge_size = 2;
  c.base.temporal_patch_size = 2;
  c.base.min_pixels = min_pixels;
  c.base.max_pixels = max_pixels;
  c.base.mean = {0.5f, 0.5f, 0.5f};
  c.base.std = {0.5f, 0.5f, 0.5f};
  return c;
}

// The plain path: each frame through the one-thread reference resize, then the reference
// preprocessing at that size.
VisionPatches plain_rows(const std::vector<RgbImage>& frames, const Qwen3VLVideoConfig& cfg) {
  const std::pair<int, int> hw = qwen3vl_video_target(frames, cfg);
  std::vector<RgbImage> resized;
  for (const RgbImage& f : frames)
    resized.push_back(f.width == hw.second && f.height == hw.first ? f : resize_bicubic_ref(f, hw.second, hw.first));
  Qwen2VLPreprocessConfig rows = cfg.base;
  rows.do_resize = false;
  return qwen2vl_preprocess_ref(resized, rows);
}

void expect_frames8_matches(const std::vector<RgbImage>& frames, const Qwen3VLVideoConfig& cfg) {
  const VisionPatches want = qwen3vl_preprocess_video(frames, cfg);
  const VisionPatches plain = plain_rows(frames, cfg);
  EXPECT_EQ(plain.grid_thw, want.grid_thw);
  EXPECT_TRUE(same_bits(plain.pixels, want.pixels)) << "today's rows vs the plain path";
  const MediaPixels m = qwen3vl_video_frames8(frames, cfg);
  ASSERT_TRUE(m.is_frames8());
  EXPECT_TRUE(m.data.empty());
  EXPECT_EQ(m.modality, Modality::Video);
  EXPECT_EQ(m.grid_thw, want.grid_thw);
  EXPECT_EQ(m.height, want.grid_thw[1] * cfg.base.patch_size);
  EXPECT_EQ(m.width, want.grid_thw[2] * cfg.base.patch_size);
  EXPECT_EQ(m.num_frames, static_cast<int32_t>(frames.size()));
  EXPECT_EQ(m.preprocess.patch_size, 16);
  EXPECT_TRUE(same_bits(qwen2vl_frames_rows(m, 0, m.grid_thw[0]), want.pixels)) << "whole item";
  const int64_t per_t = static_cast<int64_t>(want.grid_thw[1]) * want.grid_thw[2] * cfg.base.patch_dim();
  for (int32_t t = 0; t < m.grid_thw[0]; ++t) {
    const std::vector<float> got = qwen2vl_frames_rows(m, t, t + 1);
    const std::vector<float> slice(want.pixels.begin() + t * per_t, want.pixels.begin() + (t + 1) * per_t);
    EXPECT_TRUE(same_bits(got, slice)) << "group " << t;
  }
  const MediaPixels rows = to_rows_form(m);
  EXPECT_FALSE(rows.is_frames8());
  EXPECT_TRUE(same_bits(rows.data, want.pixels));
}

TEST(Qwen3VLFrames8, RowsEqualTodaysRowsBitForBit) {
  std::mt19937 g(40);
  struct Case {
    int w, h, frames;
    int64_t min_pixels, max_pixels;
    bool resize;
  };
  for (const Case& c : {Case{70, 50, 3, 4096, 49152, true},     // 50x70 -> 64x64 (up; t_bar 4)
                        Case{320, 240, 8, 4096, 49152, true},   // down, both axes
                        Case{130, 100, 5, 4096, 49152, true},   // 96x128: down, odd count
                        Case{64, 64, 4, 4096, 49152, true},     // already the target: no resize
                        Case{96, 64, 7, 4096, 1 << 20, true},   // already the target, odd count
                        Case{64, 70, 2, 4096, 49152, true},     // one axis (height 70 -> 64)
                        Case{448, 448, 6, 4096, 12845056, true},  // the long-video bench's frames, kept
                        Case{96, 64, 3, 4096, 49152, false}}) {  // do_resize off: the frames' own size
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " x" + std::to_string(c.frames));
    std::vector<RgbImage> frames;
    for (int i = 0; i < c.frames; ++i) frames.push_back(random_image(c.w, c.h, g));
    Qwen3VLVideoConfig cfg = video_config(c.min_pixels, c.max_pixels);
    cfg.base.do_resize = c.resize;
    expect_frames8_matches(frames, cfg);
  }
  // The per-frame cap changes the target; the rows follow it.
  Qwen3VLVideoConfig capped = video_config(4096, 49152);
  capped.cap_pixels_per_frame = true;
  capped.max_video_tokens = 4;
  std::vector<RgbImage> frames;
  for (int i = 0; i < 8; ++i) frames.push_back(random_image(320, 240, g));
  const MediaPixels m = qwen3vl_video_frames8(frames, capped);
  EXPECT_EQ(m.height, 32);
  EXPECT_EQ(m.width, 64);
  expect_frames8_matches(frames, capped);
  // What qwen3vl_preprocess_video refuses, the Frames8 form refuses the same way.
  EXPECT_THROW(qwen3vl_video_frames8({random_image(64, 64, g)}, capped), RequestError);  // fewer frames than tp
  EXPECT_THROW(qwen3vl_video_frames8({random_image(64, 64, g), random_image(64, 48, g)}, capped), RequestError);
  Qwen3VLVideoConfig off = video_config(4096, 49152);
  off.base.do_resize = false;
  EXPECT_THROW(qwen3vl_video_frames8({random_image(70, 64, g), random_image(70, 64, g)}, off), RequestError);
}

TEST(Qwen3VLFrames8, SplitGivesFrames8GroupsWithTheRowsGroupsRows) {
  std::mt19937 g(41);
  const Qwen3VLVideoConfig cfg = video_config(4096, 49152);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 5; ++i) frames.push_back(random_image(130, 100, g));
  MediaPixels f8 = qwen3vl_video_frames8(frames, cfg);
  MediaPixels rows = to_rows_form(f8);
  for (MediaPixels* m : {&f8, &rows}) {
    m->group_seconds = {0.25, 1.25, 2.0};
    m->second_per_grid = 1.5f;
  }
  const std::vector<MediaPixels> a = qwen3vl_split_video(f8, 2), b = qwen3vl_split_video(rows, 2);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    SCOPED_TRACE("group " + std::to_string(t));
    ASSERT_TRUE(a[t].is_frames8());
    EXPECT_FALSE(b[t].is_frames8());
    EXPECT_EQ(a[t].frames.size(), t < 2 ? 2u : 1u);  // the fifth frame alone (padded when its rows are made)
    EXPECT_EQ(a[t].grid_thw, b[t].grid_thw);
    EXPECT_EQ(a[t].height, b[t].height);
    EXPECT_EQ(a[t].width, b[t].width);
    EXPECT_EQ(a[t].num_frames, b[t].num_frames);
    EXPECT_EQ(a[t].video_group, b[t].video_group);
    EXPECT_EQ(a[t].group_seconds, b[t].group_seconds);
    EXPECT_EQ(a[t].second_per_grid, b[t].second_per_grid);
    EXPECT_TRUE(same_bits(qwen2vl_frames_rows(a[t], 0, 1), b[t].data));
  }
  EXPECT_EQ(a[2].num_frames, 1);
  // Moving the video in moves its frames (a long video is not copied).
  const std::vector<MediaPixels> moved = qwen3vl_split_video(std::move(f8), 2);
  EXPECT_EQ(moved[0].frames[0].pixels, frames[0].pixels);
  EXPECT_EQ(moved[2].frames[0].pixels, frames[4].pixels);
}

#define SKIP_WITHOUT_FIXTURE()              \
  if (!testing::qwen3vl_fixture_present()) \
  GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated (tools/fixtures/make_qwen3_vl_fixtures.py)"

// Media stored as U8 [H, W, 3] (images) or [T, H, W, 3] (videos) in media.safetensors.
std::vector<RgbImage> fixture_frames(const SafetensorsFile& media, const std::string& name) {
  const TensorView& t = media.tensors().at(name);
  const bool video = t.shape.ndim == 4;
  const int64_t T = video ? t.dim(0) : 1, H = t.dim(video ? 1 : 0), W = t.dim(video ? 2 : 1);
  std::vector<RgbImage> out;
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (int64_t i = 0; i < T; ++i) {
    RgbImage im;
    im.width = static_cast<int>(W);
    im.height = static_cast<int>(H);
    im.pixels.assign(p + i * H * W * 3, p + (i + 1) * H * W * 3);
    out.push_back(std::move(im));
  }
  return out;
}

TEST(Qwen3VLFrames8, CpuModelTakesFrames8ItemsAsRows) {
  SKIP_WITHOUT_FIXTURE();
  const auto model = Qwen3VLModel::load(testing::qwen3vl_model_dir());
  const auto media = SafetensorsFile::open(testing::qwen3vl_fixture_dir() + "/media.safetensors");
  const std::string proc = testing::qwen3vl_fixture_dir() + "/processor";
  const Qwen3VLVideoConfig vcfg = Qwen3VLVideoConfig::load(proc);
  const Qwen2VLPreprocessConfig icfg = Qwen2VLPreprocessConfig::load(proc, false);
  int videos = 0, images = 0;
  for (const auto& entry : media->tensors()) {
    const std::string& name = entry.first;
    SCOPED_TRACE(name);
    std::vector<MediaPixels> f8;
    if (name.rfind("vid.", 0) == 0) {
      f8 = model->split_video(qwen3vl_video_frames8(fixture_frames(*media, name), vcfg));
      ++videos;
    } else if (name.rfind("img.", 0) == 0) {
      f8.push_back(qwen2vl_frames8(fixture_frames(*media, name), icfg, Modality::Image));
      ++images;
    } else {
      continue;
    }
    std::vector<MediaPixels> rows;
    for (const MediaPixels& m : f8) rows.push_back(to_rows_form(m));
    if (name.rfind("vid.", 0) == 0) {  // the groups' rows are today's video rows, group after group
      const VisionPatches want = qwen3vl_preprocess_video(fixture_frames(*media, name), vcfg);
      std::vector<float> got;
      for (const MediaPixels& r : rows) got.insert(got.end(), r.data.begin(), r.data.end());
      EXPECT_TRUE(same_bits(got, want.pixels));
    }
    int64_t tokens = 0;
    for (size_t k = 0; k < f8.size(); ++k) {
      EXPECT_EQ(model->media_tokens(f8[k], static_cast<int>(k)), model->media_tokens(rows[k], static_cast<int>(k)));
      tokens += model->media_tokens(rows[k], static_cast<int>(k));
    }
    std::vector<const MediaPixels*> pf, pr;
    for (size_t k = 0; k < f8.size(); ++k) {
      pf.push_back(&f8[k]);
      pr.push_back(&rows[k]);
    }
    const auto C = static_cast<size_t>(model->embedding_planes() * model->config().vision.out_hidden_size);
    std::vector<float> a(static_cast<size_t>(tokens) * C), b(a.size());
    model->encode_media(pf, a.data());
    model->encode_media(pr, b.data());
    EXPECT_TRUE(same_bits(a, b)) << "the same rows, the same embeddings";
    // One Frames8 item alone (the single-item path).
    std::vector<float> one(static_cast<size_t>(model->media_tokens(f8[0], 0)) * C);
    model->encode_media(std::span<const MediaPixels* const>(pf.data(), 1), one.data());
    EXPECT_TRUE(same_bits(one, std::vector<float>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(one.size()))));
  }
  EXPECT_GE(videos, 1);
  EXPECT_GE(images, 1);
  // Frames8 items that do not give their grid are refused (400).
  std::mt19937 g(42);
  MediaPixels bad = qwen3vl_video_frames8({random_image(64, 64, g), random_image(64, 64, g)}, vcfg);
  bad.grid_thw[0] = 2;  // two groups of one group's frames
  EXPECT_THROW(model->media_tokens(bad, 0), RequestError);
  bad = qwen3vl_video_frames8({random_image(64, 64, g), random_image(64, 64, g)}, vcfg);
  bad.width += 16;  // another target than the grid's
  EXPECT_THROW(model->media_tokens(bad, 0), RequestError);
  Qwen2VLPreprocessConfig p14 = icfg;
  p14.patch_size = 14;
  EXPECT_THROW(model->media_tokens(qwen2vl_frames8({random_image(56, 56, g)}, p14, Modality::Image), 0), RequestError);
}

}  // namespace
}  // namespace vlm
