// Qwen3VLMediaLoader's two forms (server/media/qwen3vl_media_loader.h): with gpu_preprocess (the
// CUDA backend) images, frame lists and video files come out as Frames8 items whose CPU reference
// rows equal the Rows form's (the CPU backend's) bit for bit, with the same grid, sizes, frame
// count and timestamps; video_groups() splits either form into groups of that form with equal
// rows and text; every item and group has a source key, equal across forms (so the prefix
// cache's media_item_key does not depend on the backend), and another fps, frame count or
// setting gives another key; frames beyond frames8_fit stay Rows.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/scheduling/block_hash.h"
#include "model/media/qwen2vl_frames.h"
#include "server/http/base64.h"
#include "server/media/qwen3vl_media_loader.h"

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

Qwen3VLMediaOptions options(bool gpu) {
  Qwen3VLMediaOptions o;
  Qwen2VLPreprocessConfig p;
  p.patch_size = 16;
  p.min_pixels = 4096;
  p.max_pixels = 30720;
  p.mean = {0.5f, 0.5f, 0.5f};
  p.std = {0.5f, 0.5f, 0.5f};
  o.image.image = p;
  o.image.video = p;
  o.video.base = p;
  o.video.base.max_pixels = 49152;
  o.max_video_frames = 16;
  o.gpu_preprocess = gpu;
  return o;
}

Qwen3VLMediaLoader loader(bool gpu, Qwen3VLMediaOptions o) {
  o.gpu_preprocess = gpu;
  MediaFetchOptions f;
  f.allowed_local_path = std::string(VLM_FIXTURES_DIR);
  return Qwen3VLMediaLoader(f, ImageLimits{}, o);
}
Qwen3VLMediaLoader loader(bool gpu) { return loader(gpu, options(gpu)); }

void expect_same_item(const MediaPixels& frames8, const MediaPixels& rows) {
  ASSERT_TRUE(frames8.is_frames8());
  ASSERT_FALSE(rows.is_frames8());
  EXPECT_EQ(frames8.modality, rows.modality);
  EXPECT_EQ(frames8.grid_thw, rows.grid_thw);
  EXPECT_EQ(frames8.height, rows.height);
  EXPECT_EQ(frames8.width, rows.width);
  EXPECT_EQ(frames8.num_frames, rows.num_frames);
  EXPECT_EQ(frames8.second_per_grid, rows.second_per_grid);
  EXPECT_EQ(frames8.group_seconds, rows.group_seconds);
  EXPECT_EQ(frames8.video_group, rows.video_group);
  EXPECT_TRUE(to_rows_form(frames8).data == rows.data) << "the CPU reference rows of the 8-bit form";
  ASSERT_TRUE(frames8.has_source_key);
  ASSERT_TRUE(rows.has_source_key);
  EXPECT_EQ(media_item_key(frames8), media_item_key(rows)) << "one key whichever form";
}

// A video from both loaders: equal items, then equal groups (text, rows, keys), keys distinct per group.
void expect_same_video(const Qwen3VLMediaLoader& gpu, MediaPixels f8, const Qwen3VLMediaLoader& cpu, MediaPixels rows) {
  expect_same_item(f8, rows);
  EXPECT_EQ(gpu.tokens(f8).num_tokens, cpu.tokens(rows).num_tokens);
  const int32_t groups = rows.grid_thw[0];
  const std::vector<MediaItemLoader::VideoGroup> a = gpu.video_groups(f8), b = cpu.video_groups(rows);
  ASSERT_EQ(static_cast<int32_t>(a.size()), groups);
  ASSERT_EQ(static_cast<int32_t>(b.size()), groups);
  for (size_t t = 0; t < a.size(); ++t) {
    SCOPED_TRACE("group " + std::to_string(t));
    EXPECT_EQ(a[t].before, b[t].before);
    EXPECT_EQ(a[t].after, b[t].after);
    expect_same_item(a[t].item, b[t].item);
    EXPECT_EQ(a[t].item.video_group, static_cast<int32_t>(t));
    EXPECT_EQ(gpu.tokens(a[t].item).num_tokens, cpu.tokens(b[t].item).num_tokens);
    if (t > 0) EXPECT_NE(media_item_key(a[t].item), media_item_key(a[t - 1].item)) << "each group its own key";
  }
}

TEST(Qwen3VLMediaLoader, VideoFileInBothFormsWithOneKey) {
  const Qwen3VLMediaLoader cpu = loader(false), gpu = loader(true);
  const std::string b64 = data_url(kVideos + "h264.mp4", "video/mp4");
  VideoSamplingParams fps2 = cpu.default_sampling();
  fps2.fps = 2.0;
  fps2.min_frames = 2;
  const MediaPixels a = cpu.load_video_file(b64, fps2, "p");
  ASSERT_GE(a.grid_thw[0], 2) << "the clip must give two groups or more";
  EXPECT_EQ(media_item_key(a), media_item_key(cpu.load_video_file("file://" + kVideos + "h264.mp4", fps2, "p")))
      << "URL vs base64";
  expect_same_video(gpu, gpu.load_video_file(b64, fps2, "p"), cpu, a);
  VideoSamplingParams fps4 = fps2;
  fps4.fps = 4.0;
  const MediaPixels c = cpu.load_video_file(b64, fps4, "p");
  ASSERT_NE(c.num_frames, a.num_frames);
  EXPECT_NE(media_item_key(c), media_item_key(a)) << "another fps";
  expect_same_video(gpu, gpu.load_video_file(b64, fps4, "p"), cpu, c);
  // Another setting (a smaller pixel budget for the clip: another target), another key.
  Qwen3VLMediaOptions o = options(false);
  o.video.base.max_pixels = 12288;
  const MediaPixels big = loader(false, o).load_video_file(b64, fps2, "p");
  ASSERT_NE(big.grid_thw, a.grid_thw);
  EXPECT_NE(media_item_key(big), media_item_key(a));
}

TEST(Qwen3VLMediaLoader, FrameListAndImageInBothFormsWithOneKey) {
  const Qwen3VLMediaLoader cpu = loader(false), gpu = loader(true);
  const std::vector<std::string> frames = {data_url(kImages + "synth_odd_83x29.png", "image/png"),
                                           "file://" + kImages + "synth_odd_83x29.png",
                                           data_url(kImages + "synth_odd_83x29.png", "image/png")};
  const MediaPixels a = cpu.load_video(frames, 2.0, "p");
  ASSERT_TRUE(a.has_source_key);
  EXPECT_EQ(a.group_seconds, (std::vector<double>{0.25, 1.0}));
  EXPECT_NE(media_item_key(a), media_item_key(cpu.load_video(frames, 1.0, "p"))) << "another fps";
  EXPECT_NE(media_item_key(a), media_item_key(cpu.load_video({frames[0], frames[1]}, 2.0, "p"))) << "fewer frames";
  expect_same_video(gpu, gpu.load_video(frames, 2.0, "p"), cpu, a);
  for (const char* name : {"coffee.jpg", "synth_odd_83x29.png"}) {
    SCOPED_TRACE(name);
    const std::string url = data_url(kImages + name, std::string(name).ends_with(".jpg") ? "image/jpeg" : "image/png");
    const MediaPixels ri = cpu.load_image(url, "p"), gi = gpu.load_image(url, "p");
    EXPECT_EQ(gi.preprocess.patch_size, 16);
    expect_same_item(gi, ri);
  }
}

// A 24-bit BMP of w x h in one gray level, as a data: URL.
std::string bmp_url(int w, int h, uint8_t level) {
  const int stride = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(stride * h);
  std::string b(size, '\0');
  auto put = [&](size_t at, uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  b[0] = 'B';
  b[1] = 'M';
  put(2, size, 4);
  put(10, 54, 4);
  put(14, 40, 4);
  put(18, static_cast<uint32_t>(w), 4);
  put(22, static_cast<uint32_t>(h), 4);
  put(26, 1, 2);
  put(28, 24, 2);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w * 3; ++x) b[54 + static_cast<size_t>(y) * stride + static_cast<size_t>(x)] = static_cast<char>(level);
  return "data:image/bmp;base64," + base64_encode(b);
}

TEST(Qwen3VLMediaLoader, FramesBeyondTheGpuReservationStayRows) {
  // Frames wider than kFrames8MaxSide (resized to 1760x32 by Qwen3-VL's rule): the GPU loader
  // keeps the Rows form, with the CPU loader's rows and key.
  const int w = kFrames8MaxSide + 64, h = 64;
  ASSERT_FALSE(frames8_fit(w, h, 1760, 32));
  const std::vector<std::string> frames = {bmp_url(w, h, 90), bmp_url(w, h, 200)};
  const MediaPixels g = loader(true).load_video(frames, 2.0, "p"), c = loader(false).load_video(frames, 2.0, "p");
  EXPECT_FALSE(g.is_frames8());
  EXPECT_EQ(g.width, 1760);
  EXPECT_EQ(g.height, 32);
  EXPECT_TRUE(g.data == c.data);
  EXPECT_EQ(media_item_key(g), media_item_key(c));
  // A frame that fits is kept as 8-bit frames.
  EXPECT_TRUE(loader(true).load_video({bmp_url(640, 64, 90), bmp_url(640, 64, 90)}, 2.0, "p").is_frames8());
}

}  // namespace
}  // namespace vlm
