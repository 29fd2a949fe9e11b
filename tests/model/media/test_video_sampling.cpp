// Frame sampling of video files (model/media/video_sampling) against the reference sampler,
// transformers 5.17's Qwen2VLVideoProcessor.sample_frames (the logic qwen-vl-utils' smart_nframes
// also follows for fps 2.0, min_frames 4, max_frames 768 and the factor 2):
//   fps:        n = floor(min(max(total / video_fps * fps, min_frames), floor(min(max_frames, total) / 2) * 2,
//                             total) / 2) * 2
//   num_frames: n = round_half_even(num_frames / 2) * 2
//   indices = torch.arange(0, total, total / n).int();  timestamps = index / video_fps;
//   sampled_fps = n / total * video_fps  (VideoMetadata.sampled_fps; second_per_grid_ts = 2 / it)
// Two tables: rows derived by hand from those formulas (each row says how), and every row of the
// table that tools/fixtures/make_video_fixtures.py ran through transformers' own sample_frames on
// the GPU machine (tests/fixtures/video/oracle/oracle.json, "table").
#include <gtest/gtest.h>

#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/media/video_sampling.h"

namespace vlm {
namespace {

VideoSamplingParams params(std::optional<double> fps, std::optional<int64_t> num_frames = std::nullopt,
                           int64_t min_frames = 4, int64_t max_frames = 768) {
  VideoSamplingParams p;
  p.fps = fps;
  p.num_frames = num_frames;
  p.min_frames = min_frames;
  p.max_frames = max_frames;
  return p;
}

struct Row {
  int64_t total;
  double video_fps;
  VideoSamplingParams p;
  std::vector<int64_t> indices;  // empty: refused
  const char* why;
};

TEST(VideoSampling, HandDerivedTable) {
  const std::vector<Row> rows = {
      {36, 12, params(2.0), {0, 6, 12, 18, 24, 30}, "36/12*2 = 6 frames, step 6 (h264.mp4)"},
      {25, 10, params(2.0), {0, 6, 12, 18}, "25/10*2 = 5 -> floor to 4, step 6.25 (vp8.webm)"},
      {36, 24, params(2.0), {0, 9, 18, 27}, "36/24*2 = 3 < min_frames 4 -> 4, step 9 (h264.mkv)"},
      {20, 10, params(2.0), {0, 5, 10, 15}, "20/10*2 = 4, step 5 (anim.gif, rgb.mp4)"},
      {90, 30, params(2.0, std::nullopt, 7), {0, 15, 30, 45, 60, 75},
       "6 < min 7 -> 7 -> floor to 6 (HF does not round min_frames up; qwen-vl-utils would take 8)"},
      {90, 30, params(2.0, std::nullopt, 4, 5), {0, 22, 45, 67}, "max_frames 5 -> floor 4; step 22.5, truncated"},
      {90, 30, params(1.0), {0, 22, 45, 67}, "90/30*1 = 3 < 4 -> 4"},
      {3, 10, params(2.0), {0, 1}, "0.6 -> min 4 -> capped at floor(3/2)*2 = 2; step 1.5"},
      {7, 1, params(2.0), {0, 1, 2, 3, 4, 5}, "14 -> capped at floor(7/2)*2 = 6"},
      {100000, 30, params(2.0), {}, "6666.7 -> max_frames 768 (checked below)"},
      {90, 30, params(std::nullopt, 7), {0, 11, 22, 33, 45, 56, 67, 78}, "num_frames 7: round(3.5) = 4 -> 8"},
      {90, 30, params(std::nullopt, 5), {0, 22, 45, 67}, "num_frames 5: round(2.5) = 2 -> 4"},
      {37, 12.5, params(std::nullopt, 13), {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33},
       "num_frames 13: round(6.5) = 6 -> 12, step 37/12"},
  };
  for (const Row& r : rows) {
    const FrameSample s = sample_frames(r.total, r.video_fps, r.p);
    if (r.total == 100000) {
      ASSERT_EQ(s.indices.size(), 768u) << r.why;
      EXPECT_EQ(std::vector<int64_t>(s.indices.begin(), s.indices.begin() + 6),
                (std::vector<int64_t>{0, 130, 260, 390, 520, 651}))
          << "step 100000/768 = 130.208";
      continue;
    }
    EXPECT_EQ(s.indices, r.indices) << r.why;
    ASSERT_EQ(s.timestamps.size(), s.indices.size());
    for (size_t i = 0; i < s.indices.size(); ++i)
      EXPECT_DOUBLE_EQ(s.timestamps[i], static_cast<double>(s.indices[i]) / r.video_fps) << r.why;
    EXPECT_DOUBLE_EQ(s.sampled_fps, static_cast<double>(r.indices.size()) / r.total * r.video_fps) << r.why;
  }
  // The Qwen2.5-VL fixtures' clips (20 frames at 10 fps, fps 2): sampled 2.0 fps, so
  // second_per_grid_ts = 2 / 2.0 = 1.0 (what transformers 5.17's processor gave, oracle.json).
  EXPECT_DOUBLE_EQ(sample_frames(20, 10, params(2.0)).sampled_fps, 2.0);
  // At fps 1.0 min_frames raises 2 frames to 4: the sampled rate is 2.0, not the asked 1.0; the
  // processor's second_per_grid_ts was 1.0 (oracle.json "probe"), i.e. 2 / sampled_fps.
  EXPECT_DOUBLE_EQ(sample_frames(20, 10, params(1.0)).sampled_fps, 2.0);
}

TEST(VideoSampling, RefusesWhatTransformersRefuses) {
  EXPECT_THROW(sample_frames(1, 10, params(2.0)), RequestError);  // floor(1/2)*2 = 0 frames
  EXPECT_THROW(sample_frames(90, 30, params(std::nullopt, 100)), RequestError);  // 100 > 90 frames
  EXPECT_THROW(sample_frames(0, 30, params(2.0)), RequestError);
  EXPECT_THROW(sample_frames(90, 0, params(2.0)), RequestError);  // no frame rate: fps impossible
  EXPECT_EQ(sample_frames(90, 0, params(std::nullopt, 4)).indices.size(), 4u);  // num_frames still works
  EXPECT_THROW(sample_frames(90, 30, params(2.0, 4)), RequestError);  // both given
}

TEST(VideoSampling, TransformersOwnSamplerTable) {
  std::ifstream in(std::string(VLM_FIXTURES_DIR) + "/video/oracle/oracle.json");
  ASSERT_TRUE(in) << "tests/fixtures/video/oracle/oracle.json";
  const nlohmann::json oracle = nlohmann::json::parse(in);
  ASSERT_GE(oracle["table"].size(), 20u);
  for (const auto& row : oracle["table"]) {
    std::optional<double> fps;
    std::optional<int64_t> nf;
    if (!row["fps"].is_null()) fps = row["fps"].get<double>();
    if (!row["num_frames"].is_null()) nf = row["num_frames"].get<int64_t>();
    const VideoSamplingParams p = params(fps, nf, row["min_frames"], row["max_frames"]);
    const std::string what = row.dump();
    if (row["indices"].is_null()) {
      EXPECT_THROW(sample_frames(row["total"], row["video_fps"], p), RequestError) << what;
      continue;
    }
    EXPECT_EQ(sample_frames(row["total"], row["video_fps"], p).indices, row["indices"].get<std::vector<int64_t>>())
        << what;
  }
}

TEST(VideoSampling, FrameCapFromTheTotalPixelBudget) {
  // qwen-vl-utils: max(min(VIDEO_MAX_PIXELS, total / n * 2), int(min_pixels * 1.05)).
  const int64_t total = 90316800;  // VIDEO_TOTAL_PIXELS = 128000 * 28 * 28 * 0.9
  EXPECT_EQ(video_frame_max_pixels(100352, 602112, total, 4, 2), 602112);          // budget 45 M: the cap
  EXPECT_EQ(video_frame_max_pixels(100352, 602112, total, 768, 2), 235200);        // 90316800 / 768 * 2
  EXPECT_EQ(video_frame_max_pixels(100352, 602112, 1000000, 768, 2), 105369);      // int(100352 * 1.05)
}

TEST(VideoSampling, CheckpointDefaults) {
  const auto p = VideoSamplingParams::from_json(
      nlohmann::json::parse(R"({"fps": 1.5, "min_frames": 6, "max_frames": 64, "temporal_patch_size": 2})"), "x");
  EXPECT_EQ(p.fps, 1.5);
  EXPECT_EQ(p.min_frames, 6);
  EXPECT_EQ(p.max_frames, 64);
  EXPECT_FALSE(p.num_frames);
  EXPECT_THROW(VideoSamplingParams::from_json(nlohmann::json::parse(R"({"fps": -1})"), "x"), LoadError);
  const auto d = VideoSamplingParams::load(std::string(VLM_FIXTURES_DIR) + "/qwen2vl_server/qwen2_vl_chat");
  EXPECT_FALSE(d.fps);  // the fixture's video_preprocessor_config.json names no fps: 2.0 applies
  EXPECT_EQ(d.min_frames, 4);
  EXPECT_EQ(d.max_frames, 768);
}

}  // namespace
}  // namespace vlm
