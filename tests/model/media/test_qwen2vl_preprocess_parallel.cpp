// qwen2vl_preprocess (temporal patches spread over the media pool, rows written through a table
// of the 256 normalized levels) against qwen2vl_preprocess_ref (one thread, whole frames
// normalized first): bit-identical rows and the same grid, on random frames that are downscaled,
// upscaled or kept, with odd frame counts (the last frame repeated), any pool size; and
// resize_bicubic with and without a pool, and BicubicResizer, against resize_bicubic_ref.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/core/check.h"
#include "model/media/image_preprocess.h"
#include "model/media/media_thread_pool.h"
#include "model/media/qwen2vl_preprocess.h"
#include "tests/support/random_image.h"

namespace vlm {
namespace {

TEST(Qwen2VLPreprocessParallel, BitIdenticalToTheReference) {
  std::mt19937 g(7);
  struct Case {
    int w, h, frames;
    int64_t max_pixels;
    bool rescale, normalize;
  };
  const Case cases[] = {
      {112, 84, 5, 28 * 28 * 1280, true, true},    // kept size? 112x84 -> 112x84 (multiples of 28)
      {448, 448, 4, 50176, true, true},            // the tiny fixture's 448 -> 224 downscale
      {100, 60, 3, 28 * 28 * 1280, true, true},    // rounded to 112x56: both passes
      {40, 30, 1, 28 * 28 * 1280, true, true},     // an image: one frame, upscaled to min_pixels
      {224, 168, 7, 28 * 28 * 1280, true, false},  // rescale only
      {224, 168, 2, 28 * 28 * 1280, false, false}, // raw levels
  };
  for (const int threads : {1, 2, 5}) {
    set_media_threads(threads);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " frames " + std::to_string(c.frames) +
                   " threads " + std::to_string(threads));
      std::vector<RgbImage> frames;
      for (int i = 0; i < c.frames; ++i) frames.push_back(random_image(c.w, c.h, g));
      Qwen2VLPreprocessConfig cfg;
      cfg.max_pixels = c.max_pixels;
      cfg.do_rescale = c.rescale;
      cfg.do_normalize = c.normalize;
      const VisionPatches ref = qwen2vl_preprocess_ref(frames, cfg);
      const VisionPatches fast = qwen2vl_preprocess(frames, cfg);
      EXPECT_EQ(fast.grid_thw, ref.grid_thw);
      EXPECT_TRUE(same_bits(fast.pixels, ref.pixels));
    }
  }
  set_media_threads(default_media_threads());
}

TEST(Qwen2VLPreprocessParallel, RefusalsAreTheSame) {
  std::mt19937 g(8);
  std::vector<RgbImage> frames{random_image(64, 64, g), random_image(64, 60, g)};
  EXPECT_THROW(qwen2vl_preprocess(frames, Qwen2VLPreprocessConfig{}), RequestError);
  EXPECT_THROW(qwen2vl_preprocess(std::span<const RgbImage>(), Qwen2VLPreprocessConfig{}), RequestError);
  std::vector<RgbImage> tiny{random_image(8, 8, g)};
  EXPECT_THROW(qwen2vl_preprocess(tiny, Qwen2VLPreprocessConfig{}), RequestError);
}

TEST(ResizeBicubic, PoolOrNotMatchesTheReference) {
  std::mt19937 g(9);
  ThreadPool pool(3);
  for (const auto [w, h, ow, oh] : {std::array<int, 4>{448, 448, 224, 224}, {97, 61, 150, 40}, {33, 200, 33, 77},
                                   {640, 360, 641, 360}, {17, 5, 3, 9}, {1000, 37, 7, 37}, {50, 50, 49, 51},
                                   {3, 20, 200, 20}, {448, 448, 448, 224}, {1280, 720, 644, 336}, {64, 48, 64, 48}}) {
    const RgbImage src = random_image(w, h, g);
    const RgbImage ref = resize_bicubic_ref(src, ow, oh);
    EXPECT_TRUE(resize_bicubic(src, ow, oh).pixels == ref.pixels) << w << "x" << h << " -> " << ow << "x" << oh;
    EXPECT_TRUE(resize_bicubic(src, ow, oh, nullptr).pixels == ref.pixels);
    EXPECT_TRUE(resize_bicubic(src, ow, oh, &pool).pixels == ref.pixels);
    // BicubicResizer: the same bytes, and again on a second image with its buffers reused.
    BicubicResizer resizer(w, h, ow, oh);
    RgbImage out;
    resizer.resize(src, out);
    EXPECT_EQ(out.width, ow);
    EXPECT_EQ(out.height, oh);
    EXPECT_TRUE(out.pixels == ref.pixels) << "resizer " << w << "x" << h << " -> " << ow << "x" << oh;
    const RgbImage src2 = random_image(w, h, g);
    resizer.resize(src2, out);
    EXPECT_TRUE(out.pixels == resize_bicubic_ref(src2, ow, oh).pixels) << "resizer, second image";
  }
}

}  // namespace
}  // namespace vlm
