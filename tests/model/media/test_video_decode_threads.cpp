// decode_video's fast paths against its plain one on every committed clip: FFmpeg's frame/slice
// threads and the skipping of non-reference frames the sampler does not pick must give the same
// RGB frames as one thread without skipping; and bad files (truncated, corrupt) end as on the
// plain path (a 400, never another error) through the threaded one.
#include <gtest/gtest.h>


#include "kernels/core/check.h"
#include "model/media/video_decode.h"
#include "tests/support/video_clips.h"

namespace vlm {
namespace {

const std::string& kDir = testing::video_fixture_dir();
using testing::kVideoClips;

// Every `step`-th frame from `start`.
DecodedVideo decode_every(const std::vector<uint8_t>& bytes, int threads, bool skip, int64_t start, int64_t step) {
  VideoLimits l;
  l.decode_threads = threads;
  l.skip_unpicked = skip;
  return decode_video(bytes, l, [&](const VideoInfo& info) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < info.num_frames; i += step) idx.push_back(i);
    return idx;
  });
}

TEST(VideoDecodeThreads, SameFramesAsOneThreadWithoutSkipping) {
  for (const char* clip : kVideoClips) {
    const auto bytes = testing::read_bytes(kDir + "/" + clip);
    for (const auto [start, step] : {std::pair<int64_t, int64_t>{0, 1}, {1, 3}, {2, 2}, {5, 7}}) {
      SCOPED_TRACE(std::string(clip) + " start " + std::to_string(start) + " step " + std::to_string(step));
      const DecodedVideo plain = decode_every(bytes, 1, false, start, step);
      ASSERT_FALSE(plain.frames.empty());
      for (const auto [threads, skip] : {std::pair<int, bool>{1, true}, {3, false}, {4, true}, {8, true}}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + (skip ? " skip" : ""));
        const DecodedVideo fast = decode_every(bytes, threads, skip, start, step);
        EXPECT_EQ(fast.info.num_frames, plain.info.num_frames);
        EXPECT_EQ(fast.indices, plain.indices);
        ASSERT_EQ(fast.frames.size(), plain.frames.size());
        for (size_t i = 0; i < fast.frames.size(); ++i) {
          EXPECT_EQ(fast.frames[i].width, plain.frames[i].width);
          EXPECT_EQ(fast.frames[i].height, plain.frames[i].height);
          EXPECT_TRUE(fast.frames[i].pixels == plain.frames[i].pixels) << "frame " << plain.indices[i];
        }
      }
    }
  }
}

// A bad file ends in a RequestError 400 or decodes (a flipped byte inside one frame's data may
// only change pixels): never another exception, with any thread count.
void expect_400_or_frames(const std::vector<uint8_t>& bytes, int threads) {
  try {
    const DecodedVideo v = decode_every(bytes, threads, true, 0, 2);
    EXPECT_EQ(v.frames.size(), v.indices.size());
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400) << e.what();
  }
}

// A cut file: the plain path and the fast ones agree: both a 400, or (a container without a
// frame count in its header, e.g. WebM, whose cut leaves fewer whole frames) the same frames.
TEST(VideoDecodeThreads, TruncatedFilesGiveThePlainPathsOutcome) {
  int refused = 0;
  for (const char* clip : kVideoClips) {
    SCOPED_TRACE(clip);
    const auto bytes = testing::read_bytes(kDir + "/" + clip);
    for (const double keep : {0.3, 0.6, 0.9}) {
      SCOPED_TRACE(keep);
      const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<int64_t>(bytes.size() * keep));
      auto outcome = [&](int threads, bool skip) -> std::vector<std::vector<uint8_t>> {
        try {
          const DecodedVideo v = decode_every(cut, threads, skip, 0, 2);
          std::vector<std::vector<uint8_t>> px;
          for (const RgbImage& f : v.frames) px.push_back(f.pixels);
          return px;
        } catch (const RequestError& e) {
          EXPECT_EQ(e.status(), 400) << e.what();
          return {};
        }
      };
      const auto plain = outcome(1, false);
      refused += plain.empty();
      EXPECT_TRUE(outcome(4, true) == plain);
      EXPECT_TRUE(outcome(2, false) == plain);
    }
  }
  EXPECT_GE(refused, 12);  // MP4/MOV/MKV/GIF cuts (header counts, missing boxes) are refused
}

TEST(VideoDecodeThreads, CorruptFilesAre400sOrFrames) {
  for (const char* clip : kVideoClips) {
    SCOPED_TRACE(clip);
    const auto bytes = testing::read_bytes(kDir + "/" + clip);
    uint32_t seed = 12345;
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<uint8_t> bad = bytes;
      for (int k = 0; k < 16; ++k) {  // 16 bytes set at random offsets
        seed = seed * 1664525u + 1013904223u;
        bad[seed % bad.size()] = static_cast<uint8_t>(seed >> 24);
      }
      for (const int threads : {1, 4}) expect_400_or_frames(bad, threads);
    }
  }
}

}  // namespace
}  // namespace vlm
