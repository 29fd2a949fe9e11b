// The GPU frame preprocessing kernels (kernels/cuda/media/frame_preprocess_cuda.h) against their
// CPU references: each resize pass on the CPU's taps equals resize_bicubic (model/media/
// image_preprocess.h) exactly, 8-bit value for value, downscaling, upscaling and one axis alone;
// the patchify through the normalize table equals qwen2vl_preprocess's rows bit for bit in f32,
// and in bf16 / f16 equals those rows rounded once.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/cuda/media/frame_preprocess_cuda.h"
#include "model/media/image_preprocess.h"
#include "model/media/qwen2vl_preprocess.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_image.h"

namespace vlm::testing {
namespace {

struct DevTaps {
  cuda::DeviceBuffer buf;
  cuda::ResizeTapsDev t{};
};
DevTaps upload_taps(int in, int out) {
  const ResizeAxisTaps a = resize_axis_taps(in, out);
  std::vector<int32_t> all(a.first);
  all.insert(all.end(), a.count.begin(), a.count.end());
  all.insert(all.end(), a.w.begin(), a.w.end());
  DevTaps d;
  d.buf = to_device(all);
  const auto* p = d.buf.as<int32_t>();
  d.t = {p, p + out, p + 2 * out, a.ksize, out};
  return d;
}

// The two passes as CudaFramePreprocessor runs them.
std::vector<uint8_t> resize_on_gpu(const RgbImage& img, int out_w, int out_h) {
  const cuda::DeviceBuffer in = to_device(img.pixels);
  const size_t out_bytes = static_cast<size_t>(out_w) * out_h * 3;
  cuda::DeviceBuffer out(out_bytes), mid(static_cast<size_t>(out_w) * img.height * 3);
  const bool rw = out_w != img.width, rh = out_h != img.height;
  if (rw && rh) {
    const DevTaps h = upload_taps(img.width, out_w), v = upload_taps(img.height, out_h);
    const ResizeAxisTaps vt = resize_axis_taps(img.height, out_h);
    const int y0 = vt.first.front(), y1 = vt.first.back() + vt.count.back();
    cuda::resize_rows_u8(in.as<uint8_t>() + static_cast<size_t>(y0) * img.width * 3, y1 - y0, img.width, h.t,
                         mid.as<uint8_t>(), nullptr);
    cuda::resize_cols_u8(mid.as<uint8_t>(), y0, out_w, v.t, out.as<uint8_t>(), nullptr);
    return to_host<uint8_t>(out, out_bytes);
  }
  if (rw) {
    const DevTaps h = upload_taps(img.width, out_w);
    cuda::resize_rows_u8(in.as<uint8_t>(), img.height, img.width, h.t, out.as<uint8_t>(), nullptr);
  } else {
    const DevTaps v = upload_taps(img.height, out_h);
    cuda::resize_cols_u8(in.as<uint8_t>(), 0, img.width, v.t, out.as<uint8_t>(), nullptr);
  }
  return to_host<uint8_t>(out, out_bytes);
}

TEST(CudaFramePreprocessKernels, ResizeEqualsTheCpuBicubic) {
  VLM_REQUIRE_GPU();
  std::mt19937 g(5);
  struct Case {
    int w, h, ow, oh;
  };
  for (const Case c : {Case{85, 57, 84, 56}, Case{448, 448, 224, 112}, Case{64, 48, 56, 56}, Case{30, 20, 140, 84},
                       Case{83, 56, 84, 56}, Case{84, 57, 84, 28}, Case{1280, 720, 644, 364}}) {
    SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " -> " + std::to_string(c.ow) + "x" +
                 std::to_string(c.oh));
    const RgbImage img = random_image(c.w, c.h, g);
    const RgbImage want = resize_bicubic_ref(img, c.ow, c.oh);
    const std::vector<uint8_t> got = resize_on_gpu(img, c.ow, c.oh);
    ASSERT_EQ(got.size(), want.pixels.size());
    size_t diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff += got[i] != want.pixels[i];
    EXPECT_EQ(diff, 0u) << "8-bit values that differ";
  }
}

TEST(CudaFramePreprocessKernels, PatchifyEqualsTheCpuRows) {
  VLM_REQUIRE_GPU();
  std::mt19937 g(9);
  Qwen2VLPreprocessConfig cfg;
  const int tp = cfg.temporal_patch_size, ps = cfg.patch_size, ms = cfg.merge_size;
  for (const auto& [w, h] : {std::pair{56, 56}, std::pair{84, 112}, std::pair{448, 448}}) {
    std::vector<RgbImage> frames;
    std::vector<uint8_t> all;
    for (int i = 0; i < 2 * tp; ++i) {  // two temporal groups
      frames.push_back(random_image(w, h, g));
      all.insert(all.end(), frames.back().pixels.begin(), frames.back().pixels.end());
    }
    const VisionPatches want = qwen2vl_preprocess(frames, cfg);
    const auto lut = qwen2vl_normalize_table(cfg);
    const std::vector<float> table(&lut[0][0], &lut[0][0] + 3 * 256);
    const cuda::DeviceBuffer d_frames = to_device(all), d_table = to_device(table);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " " + dtype_name(dt));
      cuda::DeviceBuffer rows(want.pixels.size() * dtype_size(dt));
      cuda::patchify_frames_u8(d_frames.as<uint8_t>(), 2, tp, h, w, ps, ms, d_table.as<float>(), rows.get(), dt,
                               nullptr);
      const std::vector<uint8_t> got = to_host<uint8_t>(rows, want.pixels.size() * dtype_size(dt));
      const std::vector<uint8_t> expect = encode(want.pixels, dt);  // the CPU rows, rounded once
      EXPECT_EQ(std::memcmp(got.data(), expect.data(), got.size()), 0);
    }
  }
}

}  // namespace
}  // namespace vlm::testing
