// Video files decoded with FFmpeg (model/media/video_decode) against transformers' reader on the
// GPU machine (tools/fixtures/make_video_fixtures.py; OpenCV 5.0 was the reader there, torchcodec
// and PyAV being absent): per committed clip (tools/fixtures/make_video_clips.sh) the frame count,
// the frame rate, the frames transformers 5.17's sample_frames picks at fps 2.0, and their pixels
// within 2 levels (exact for the GIF and the lossless RGB H.264). AV1 has no oracle (OpenCV's
// FFmpeg there has no software AV1 decoder): its count, size and rate are checked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/media/image_decode.h"
#include "model/media/video_decode.h"
#include "model/media/video_sampling.h"

namespace vlm {
namespace {

const std::string kDir = std::string(VLM_FIXTURES_DIR) + "/video";

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return {s.begin(), s.end()};
}

DecodedVideo decode_at_2fps(const std::vector<uint8_t>& bytes, const VideoLimits& limits = {}) {
  return decode_video(bytes, limits, [](const VideoInfo& info) {
    VideoSamplingParams p;
    p.fps = 2.0;
    return sample_frames(info.num_frames, info.fps, p).indices;
  });
}

TEST(VideoDecode, ClipsMatchTransformersReader) {
  std::ifstream in(kDir + "/oracle/oracle.json");
  ASSERT_TRUE(in);
  const nlohmann::json clips = nlohmann::json::parse(in)["clips"];
  ASSERT_EQ(clips.size(), 7u);  // all but av1.webm
  const std::map<std::string, std::pair<std::string, std::string>> kinds = {
      {"h264.mp4", {"mov,mp4,m4a,3gp,3g2,mj2", "h264"}}, {"hevc.mov", {"mov,mp4,m4a,3gp,3g2,mj2", "hevc"}},
      {"vp8.webm", {"matroska,webm", "vp8"}},           {"vp9.webm", {"matroska,webm", "vp9"}},
      {"h264.mkv", {"matroska,webm", "h264"}},          {"anim.gif", {"gif", "gif"}},
      {"rgb.mp4", {"mov,mp4,m4a,3gp,3g2,mj2", "h264"}}};
  for (const auto& [clip, rec] : clips.items()) {
    SCOPED_TRACE(clip);
    const DecodedVideo v = decode_at_2fps(slurp(kDir + "/" + clip));
    EXPECT_EQ(v.info.container, kinds.at(clip).first);
    EXPECT_EQ(v.info.codec, kinds.at(clip).second);
    EXPECT_EQ(v.info.num_frames, rec["num_frames"].get<int64_t>());
    EXPECT_DOUBLE_EQ(v.info.fps, rec["fps"].get<double>());
    EXPECT_EQ(v.info.width, rec["width"].get<int>());
    EXPECT_EQ(v.info.height, rec["height"].get<int>());
    ASSERT_EQ(v.indices, rec["hf_indices_fps2"].get<std::vector<int64_t>>());
    const bool exact = clip == "anim.gif" || clip == "rgb.mp4";
    int worst = 0;
    for (size_t k = 0; k < v.indices.size(); ++k) {
      std::string name = clip;
      name[name.find('.')] = '_';
      const RgbImage want = decode_image(slurp(kDir + "/oracle/frames/" + name + "_" + std::to_string(v.indices[k]) + ".png"));
      const RgbImage& got = v.frames[k];
      ASSERT_EQ(got.width, want.width);
      ASSERT_EQ(got.height, want.height);
      for (size_t i = 0; i < got.pixels.size(); ++i) worst = std::max(worst, std::abs(got.pixels[i] - want.pixels[i]));
    }
    EXPECT_LE(worst, exact ? 0 : 2) << "largest difference to transformers' OpenCV frames, in levels";
    std::printf("[ video    ] %-9s %s/%s %dx%d %lld frames at %g fps: max |diff| %d levels over %zu frames\n",
                clip.c_str(), v.info.container.c_str(), v.info.codec.c_str(), v.info.width, v.info.height,
                static_cast<long long>(v.info.num_frames), v.info.fps, worst, v.indices.size());
  }
}

TEST(VideoDecode, Av1WebmDecodes) {
  const DecodedVideo v = decode_at_2fps(slurp(kDir + "/av1.webm"));
  EXPECT_EQ(v.info.codec, "libdav1d");
  EXPECT_EQ(v.info.num_frames, 20);
  EXPECT_DOUBLE_EQ(v.info.fps, 10.0);
  EXPECT_EQ(v.indices, (std::vector<int64_t>{0, 5, 10, 15}));
  ASSERT_EQ(v.frames.size(), 4u);
  EXPECT_EQ(v.frames[0].width, 64);
  EXPECT_EQ(v.frames[0].height, 48);
}

TEST(VideoDecode, LimitsRefuseBeforeDecoding) {
  const auto clip = slurp(kDir + "/h264.mp4");  // 64x48, 36 frames, 3 s
  auto refused = [&](const VideoLimits& l, const std::string& needle) {
    try {
      decode_at_2fps(clip, l);
      ADD_FAILURE() << "accepted; wanted " << needle;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  VideoLimits l;
  l.max_pixels = 64 * 48 - 1;
  refused(l, "pixels a frame");
  l = {};
  l.max_seconds = 2;
  refused(l, "at most 2 s");
  l = {};
  l.max_frames = 35;
  refused(l, "more than 35 frames");
  l = {};
  l.max_bytes = 100;
  refused(l, "bytes");
  l = {};
  l.timeout_ms = 0;  // already over: the first check fires
  refused(l, "time limit");
}

TEST(VideoDecode, PickerSeesTheCountAndMayTakeNothing) {
  const DecodedVideo v = decode_video(slurp(kDir + "/vp9.webm"), {}, [](const VideoInfo& info) {
    EXPECT_EQ(info.num_frames, 30);
    return std::vector<int64_t>{};
  });
  EXPECT_TRUE(v.frames.empty());
  EXPECT_EQ(v.info.num_frames, 30);
}

}  // namespace
}  // namespace vlm
