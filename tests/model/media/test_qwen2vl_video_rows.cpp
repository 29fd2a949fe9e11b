// Qwen2VLVideoRows (rows made while decode_video runs, through its VideoFrameSink) against the
// path it replaces, decode_video's frames then qwen2vl_preprocess: the same grid and bit-identical
// rows, on every committed clip and on a 448x448 H.264 clip with B-frames made here with the
// ffmpeg CLI (over several conversion batches; skipped without ffmpeg), with the per-frame pixel
// cap on and off, downscaled and kept sizes, odd pick counts (the last frame repeated), 1 and 3
// media threads. Also: the sink sees each picked frame once with the frames DecodedVideo holds;
// a sink's exception comes out of decode_video; nothing picked calls no sink.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "kernels/core/check.h"
#include "model/media/media_thread_pool.h"
#include "model/media/qwen2vl_preprocess.h"
#include "model/media/qwen2vl_video_rows.h"
#include "model/media/video_decode.h"
#include "model/media/video_sampling.h"
#include "tests/support/random_image.h"
#include "tests/support/video_clips.h"

namespace vlm {
namespace {

const std::string& kDir = testing::video_fixture_dir();
using testing::kVideoClips;

FramePicker every(int64_t start, int64_t step) {
  return [=](const VideoInfo& info) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < info.num_frames; i += step) idx.push_back(i);
    return idx;
  };
}

// The rows both ways for one clip, picker and settings.
void expect_same_rows(const std::vector<uint8_t>& bytes, const FramePicker& pick, const Qwen2VLPreprocessConfig& cfg,
                      int64_t total_pixels) {
  const VideoLimits limits;
  const DecodedVideo video = decode_video(bytes, limits, pick);
  ASSERT_FALSE(video.frames.empty());
  Qwen2VLPreprocessConfig c = cfg;
  if (total_pixels > 0)
    c.max_pixels = std::min(c.max_pixels, video_frame_max_pixels(c.min_pixels, c.max_pixels, total_pixels,
                                                                 static_cast<int64_t>(video.frames.size()),
                                                                 c.temporal_patch_size));
  const VisionPatches want = qwen2vl_preprocess(video.frames, c);

  Qwen2VLVideoRows sink(cfg, total_pixels);
  const DecodedVideo fused = decode_video(bytes, limits, pick, sink);
  EXPECT_TRUE(fused.frames.empty());
  EXPECT_EQ(fused.indices, video.indices);
  EXPECT_EQ(sink.config().max_pixels, c.max_pixels);
  const VisionPatches got = sink.take();
  EXPECT_EQ(got.grid_thw, want.grid_thw);
  EXPECT_TRUE(same_bits(got.pixels, want.pixels));
}

TEST(Qwen2VLVideoRows, SameRowsAsDecodeThenPreprocess) {
  Qwen2VLPreprocessConfig kept;  // Qwen2-VL's defaults: 64x48 -> 56x56, 112x84 kept
  Qwen2VLPreprocessConfig small = kept;
  small.min_pixels = 28 * 28;
  small.max_pixels = 28 * 28 * 2;  // downscaled
  for (const int threads : {1, 3}) {
    set_media_threads(threads);
    for (const char* clip : kVideoClips) {
      const auto bytes = testing::read_bytes(kDir + "/" + clip);
      for (const auto& [start, step] : {std::pair<int64_t, int64_t>{0, 1}, {1, 3}, {0, 2}, {2, 5}}) {
        SCOPED_TRACE(std::string(clip) + " start " + std::to_string(start) + " step " + std::to_string(step) +
                     " threads " + std::to_string(threads));
        expect_same_rows(bytes, every(start, step), kept, 0);
        expect_same_rows(bytes, every(start, step), small, 0);
        expect_same_rows(bytes, every(start, step), kept, 28 * 28 * 40);  // the total-pixel cap bites
      }
    }
  }
  set_media_threads(default_media_threads());
}

// A 448x448 clip as the long-video benchmark's (x264 defaults: B-frames, b-pyramid), 120 frames:
// several conversion batches; the tiny fixture's 448 -> 224 downscale and Qwen2-VL-7B's kept size.
TEST(Qwen2VLVideoRows, SameRowsOnALargerH264Clip) {
  const std::string path = "/tmp/vlm_video_rows_test_" + std::to_string(getpid()) + ".mp4";
  const std::string cmd = "ffmpeg -hide_banner -loglevel error -y -f lavfi -i testsrc2=size=448x448:rate=4:duration=30 "
                          "-c:v libx264 -pix_fmt yuv420p -preset ultrafast -bf 3 " + path + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no ffmpeg CLI to make the clip";
  const auto bytes = testing::read_bytes(path);
  std::remove(path.c_str());
  Qwen2VLPreprocessConfig fixture;  // tests/fixtures/qwen2vl_server/qwen2_vl_chat's video settings
  fixture.min_pixels = 3136;
  fixture.max_pixels = 50176;
  Qwen2VLPreprocessConfig seven_b;  // Qwen2-VL-7B-Instruct's
  seven_b.min_pixels = 3136;
  seven_b.max_pixels = 12845056;
  for (const int threads : {1, 2}) {
    set_media_threads(threads);
    SCOPED_TRACE("threads " + std::to_string(threads));
    expect_same_rows(bytes, every(0, 2), fixture, 90316800);
    expect_same_rows(bytes, every(1, 3), seven_b, 90316800);  // 40 picks
    expect_same_rows(bytes, every(0, 1), fixture, 0);          // all 120
  }
  set_media_threads(default_media_threads());
}

// Records what the sink sees.
struct RecordingSink : VideoFrameSink {
  int64_t begun = -1;
  std::mutex mu;
  std::vector<RgbImage> frames;
  std::vector<int> calls;
  int64_t throw_at = -1;
  void begin(const VideoInfo&, int64_t n) override {
    begun = n;
    frames.resize(static_cast<size_t>(n));
    calls.assign(static_cast<size_t>(n), 0);
  }
  void frame(int64_t k, const RgbImage& rgb) override {
    if (k == throw_at) throw std::runtime_error("sink refused");
    std::lock_guard<std::mutex> lock(mu);
    ++calls[static_cast<size_t>(k)];
    frames[static_cast<size_t>(k)] = rgb;
  }
};

TEST(VideoFrameSink, EachPickedFrameOnceAsDecodedVideoHasIt) {
  for (const char* clip : kVideoClips) {
    SCOPED_TRACE(clip);
    const auto bytes = testing::read_bytes(kDir + "/" + clip);
    const DecodedVideo video = decode_video(bytes, VideoLimits{}, every(1, 2));
    RecordingSink sink;
    decode_video(bytes, VideoLimits{}, every(1, 2), sink);
    ASSERT_EQ(sink.begun, static_cast<int64_t>(video.frames.size()));
    for (size_t k = 0; k < video.frames.size(); ++k) {
      EXPECT_EQ(sink.calls[k], 1) << k;
      EXPECT_EQ(sink.frames[k].width, video.frames[k].width);
      EXPECT_EQ(sink.frames[k].height, video.frames[k].height);
      EXPECT_TRUE(sink.frames[k].pixels == video.frames[k].pixels) << k;
    }
  }
}

TEST(VideoFrameSink, ASinksErrorComesOutAndNothingPickedCallsNothing) {
  const auto bytes = testing::read_bytes(kDir + "/h264.mp4");
  RecordingSink bad;
  bad.throw_at = 3;
  EXPECT_THROW(decode_video(bytes, VideoLimits{}, every(0, 1), bad), std::runtime_error);
  RecordingSink none;
  const DecodedVideo v = decode_video(bytes, VideoLimits{}, [](const VideoInfo&) { return std::vector<int64_t>{}; }, none);
  EXPECT_TRUE(v.indices.empty());
  EXPECT_EQ(none.begun, -1);
  // A size the preprocessing refuses comes out of begin() as a 400.
  Qwen2VLPreprocessConfig odd;
  odd.do_resize = false;  // 64x48 is not a multiple of 28
  Qwen2VLVideoRows rows(odd, 0);
  try {
    decode_video(bytes, VideoLimits{}, every(0, 1), rows);
    ADD_FAILURE() << "no error";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
  }
}

}  // namespace
}  // namespace vlm
