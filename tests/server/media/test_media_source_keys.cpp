// Media keys from the source bytes (server/media/qwen2vl_media_loader.h, media_item_key in
// engine/scheduling/block_hash.h): the same bytes give the same key whether sent as a file URL or
// as base64, and whichever form (Rows or the GPU's Frames8) the loader hands; another fps, frame
// count or resize target gives another key; the key of an item with a source key does not read
// its pixels. The Frames8 items' CPU rows equal the Rows items' values (real images and a real
// video file through the loader).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/scheduling/block_hash.h"
#include "model/media/qwen2vl_frames.h"
#include "server/http/base64.h"
#include "server/media/qwen2vl_media_loader.h"

namespace vlm {
namespace {

const std::string kImages = std::string(VLM_FIXTURES_DIR) + "/llava/images/";
const std::string kVideos = std::string(VLM_FIXTURES_DIR) + "/video/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << path;
  return ss.str();
}

std::string data_url(const std::string& path, const char* mime) {
  return std::string("data:") + mime + ";base64," + base64_encode(slurp(path));
}

Qwen2VLMediaLoader loader(bool gpu, int64_t image_max_pixels = 200 * 28 * 28) {
  Qwen2VLMediaOptions o;
  o.image.max_pixels = image_max_pixels;
  o.video.max_pixels = 64 * 28 * 28;
  o.max_video_frames = 16;
  o.gpu_preprocess = gpu;
  MediaFetchOptions f;
  f.allowed_local_path = std::string(VLM_FIXTURES_DIR);
  return Qwen2VLMediaLoader(f, ImageLimits{}, o);
}

void expect_same_rows(const MediaPixels& frames8, const MediaPixels& rows) {
  ASSERT_TRUE(frames8.is_frames8());
  ASSERT_FALSE(rows.is_frames8());
  EXPECT_EQ(frames8.grid_thw, rows.grid_thw);
  EXPECT_EQ(frames8.height, rows.height);
  EXPECT_EQ(frames8.width, rows.width);
  EXPECT_EQ(frames8.num_frames, rows.num_frames);
  EXPECT_EQ(frames8.second_per_grid, rows.second_per_grid);
  EXPECT_TRUE(to_rows_form(frames8).data == rows.data) << "the CPU reference rows of the 8-bit form";
  EXPECT_EQ(media_item_key(frames8), media_item_key(rows)) << "one key whichever form";
}

TEST(MediaSourceKeys, ImageUrlAndBase64AndBothFormsShareAKey) {
  const Qwen2VLMediaLoader cpu = loader(false), gpu = loader(true);
  for (const char* name : {"coffee.jpg", "synth_odd_83x29.png"}) {
    SCOPED_TRACE(name);
    const std::string path = kImages + name;
    const std::string b64 = data_url(path, std::string(name).ends_with(".jpg") ? "image/jpeg" : "image/png");
    const MediaPixels a = cpu.load_image(b64, "p"), b = cpu.load_image("file://" + path, "p");
    ASSERT_TRUE(a.has_source_key);
    EXPECT_EQ(media_item_key(a), media_item_key(b)) << "URL vs base64: the same bytes";
    const MediaPixels g = gpu.load_image(b64, "p");
    EXPECT_EQ(g.num_frames, 0);
    expect_same_rows(g, a);
    // Other preprocessing, other key.
    const MediaPixels small = loader(false, 40 * 28 * 28).load_image(b64, "p");
    if (std::string(name) == "coffee.jpg") EXPECT_NE(small.grid_thw, a.grid_thw);  // the small one fits both
    EXPECT_NE(media_item_key(small), media_item_key(a)) << "other settings, other key (even at the same grid)";
  }
  EXPECT_NE(media_item_key(cpu.load_image(data_url(kImages + "cat_crop.png", "image/png"), "p")),
            media_item_key(cpu.load_image(data_url(kImages + "camera_crop.png", "image/png"), "p")))
      << "other bytes";
}

TEST(MediaSourceKeys, VideoFileKeysFollowTheSampling) {
  const Qwen2VLMediaLoader cpu = loader(false), gpu = loader(true);
  const std::string b64 = data_url(kVideos + "h264.mp4", "video/mp4");
  VideoSamplingParams fps2 = cpu.default_sampling();
  fps2.fps = 2.0;
  fps2.min_frames = 2;
  VideoSamplingParams fps4 = fps2;
  fps4.fps = 4.0;
  const MediaPixels a = cpu.load_video_file(b64, fps2, "p");
  const MediaPixels b = cpu.load_video_file("file://" + kVideos + "h264.mp4", fps2, "p");
  ASSERT_TRUE(a.has_source_key);
  EXPECT_EQ(media_item_key(a), media_item_key(b)) << "URL vs base64";
  const MediaPixels c = cpu.load_video_file(b64, fps4, "p");
  ASSERT_NE(c.num_frames, a.num_frames) << "the clip must give more frames at fps 4";
  EXPECT_NE(media_item_key(c), media_item_key(a)) << "another fps";
  VideoSamplingParams n4 = fps2;
  n4.fps.reset();
  n4.num_frames = 4;
  VideoSamplingParams n6 = n4;
  n6.num_frames = 6;
  EXPECT_NE(media_item_key(cpu.load_video_file(b64, n4, "p")), media_item_key(cpu.load_video_file(b64, n6, "p")))
      << "another frame count";
  expect_same_rows(gpu.load_video_file(b64, fps2, "p"), a);
  // Another resize target (a larger per-frame minimum), another key.
  Qwen2VLMediaOptions o = loader(false).options();
  o.video.min_pixels = 4 * 56 * 56;
  const MediaPixels small = Qwen2VLMediaLoader(MediaFetchOptions{}, ImageLimits{}, o).load_video_file(b64, fps2, "p");
  ASSERT_NE(small.grid_thw, a.grid_thw);
  EXPECT_NE(media_item_key(small), media_item_key(a));
}

TEST(MediaSourceKeys, FrameListKeysFollowTheFps) {
  const Qwen2VLMediaLoader cpu = loader(false), gpu = loader(true);
  const std::vector<std::string> frames = {data_url(kImages + "synth_odd_83x29.png", "image/png"),
                                           data_url(kImages + "synth_odd_83x29.png", "image/png"),
                                           "file://" + kImages + "synth_odd_83x29.png"};
  const MediaPixels a = cpu.load_video(frames, 2.0, "p");
  ASSERT_TRUE(a.has_source_key);
  EXPECT_EQ(media_item_key(a), media_item_key(cpu.load_video({frames[2], frames[0], frames[1]}, 2.0, "p")))
      << "the same bytes in the same order, URL or base64";
  EXPECT_NE(media_item_key(a), media_item_key(cpu.load_video(frames, 1.0, "p"))) << "another fps";
  EXPECT_NE(media_item_key(a), media_item_key(cpu.load_video({frames[0], frames[1]}, 2.0, "p"))) << "fewer frames";
  expect_same_rows(gpu.load_video(frames, 2.0, "p"), a);
}

TEST(MediaSourceKeys, ASourceKeyReplacesThePixels) {
  MediaPixels m;
  m.data.assign(1176 * 4, 0.5f);
  m.grid_thw = {1, 2, 2};
  const BlockHash by_pixels = media_item_key(m);
  m.data[7] = 0.25f;
  EXPECT_NE(media_item_key(m), by_pixels) << "no source key: the pixels count";
  m.has_source_key = true;
  m.source_key = {1, 2};
  const BlockHash by_source = media_item_key(m);
  m.data.assign(m.data.size(), -1.0f);
  EXPECT_EQ(media_item_key(m), by_source) << "the source key stands for the pixels";
  m.source_key = {1, 3};
  EXPECT_NE(media_item_key(m), by_source);
  m.grid_thw = {1, 4, 1};
  m.source_key = {1, 2};
  EXPECT_NE(media_item_key(m), by_source) << "the grid still counts";
}

}  // namespace
}  // namespace vlm
