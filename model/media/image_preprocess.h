// CLIPImageProcessor / LlavaImageProcessor on the CPU, from a checkpoint's preprocessor_config.json.
// Steps, each enabled by its flag: (pad to a square filled with int(mean * 255), LLaVA-1.5's
// expand2square / LlavaImageProcessor do_pad) -> resize (shortest_edge, or height/width) with
// bicubic resampling computed as PIL's Image.resize does on 8-bit images -> center crop ->
// rescale and normalize -> pixel_values [3, H, W] f32.
//
// How close this is to transformers 5.17: its default CLIPImageProcessor resizes with torchvision
// (antialiased bicubic on uint8), which differs from PIL by at most a couple of levels; we follow
// PIL (the reference the processors were written against). After the resize, everything is
// bit-exact with the torchvision backend: center crop top = (h - ch) / 2 (floored), and the fused
// rescale+normalize (x - f32(mean * (1 / rescale))) / f32(std * (1 / rescale)) in f32.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/core/thread_pool.h"
#include "model/media/image_decode.h"

namespace vlm {

struct ImagePreprocessConfig {
  bool do_pad = false;            // expand to square with the mean color, before resizing
  bool do_resize = true;
  int shortest_edge = 0;          // resize so the short side is this (0: use resize_h/resize_w)
  int resize_h = 0, resize_w = 0;
  int resample = 3;               // PIL code; only 3 (bicubic) is supported
  bool do_center_crop = true;
  int crop_h = 0, crop_w = 0;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> mean{0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> std{0.26862954f, 0.26130258f, 0.27577711f};

  // Parses preprocessor_config.json content; `source` names the file in errors. Throws LoadError
  // for an unsupported resample mode or a missing/invalid size.
  static ImagePreprocessConfig from_json(const nlohmann::json& j, const std::string& source);
  // Reads DIR/preprocessor_config.json, else transformers 5's DIR/processor_config.json
  // "image_processor" (model/media/processor_config.h). Throws LoadError naming the file.
  static ImagePreprocessConfig load(const std::string& model_dir);

  // Output height and width of preprocess().
  std::pair<int, int> output_size_for(int width, int height) const;
};

// HF get_resize_output_image_size with default_to_square=False: the short side becomes `short_side`,
// the long one int(short_side * long / short) (truncated). Returns {width, height}.
std::pair<int, int> shortest_edge_size(int width, int height, int short_side);

// Pads to a max(w, h) square, the image centered with offsets ((side - w) / 2, (side - h) / 2).
RgbImage pad_to_square(const RgbImage& img, std::array<uint8_t, 3> color);

// PIL Image.resize(size, BICUBIC) on an RGB image: separable antialiased convolution (bicubic
// a = -0.5, support 2 * max(1, in/out)), horizontal pass first (only the rows the vertical pass
// reads), 8-bit rounding between passes, 22-bit fixed-point coefficients. A pass whose size is
// unchanged is skipped, as in PIL.
// Runs on global_thread_pool().
RgbImage resize_bicubic(const RgbImage& img, int out_w, int out_h);
// The same on `pool`, or on the calling thread when pool is null (callers already running one
// task per frame on a pool of their own). Identical output.
RgbImage resize_bicubic(const RgbImage& img, int out_w, int out_h, ThreadPool* pool);
// Reference: the same math one output sample at a time with freshly computed coefficients.
RgbImage resize_bicubic_ref(const RgbImage& img, int out_w, int out_h);

// resize_bicubic for many images of one size on the calling thread: the taps computed once, the
// intermediate image and scratch kept from call to call (model/media/bicubic_resizer.cpp, with
// resize_bicubic). Not for concurrent calls on one resizer.
class BicubicResizer {
 public:
  BicubicResizer(int in_w, int in_h, int out_w, int out_h);  // all > 0
  ~BicubicResizer();
  BicubicResizer(const BicubicResizer&) = delete;
  BicubicResizer& operator=(const BicubicResizer&) = delete;
  // out = resize_bicubic(img, out_w, out_h), byte for byte; img must be in_w x in_h. out's
  // allocation is reused when big enough.
  void resize(const RgbImage& img, RgbImage& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The fixed-point taps resize_bicubic uses on one axis (PIL's precompute_coeffs +
// normalize_coeffs_8bpc): output sample i reads input [first[i], first[i] + count[i]) with
// weights w[i * ksize + j] (kResizePrecisionBits fractional bits); a pass sums
// (1 << (kResizePrecisionBits - 1)) + sum in * w, shifts right by kResizePrecisionBits and clamps
// to [0, 255]. The GPU resize (kernels/cuda/media/frame_preprocess_cuda.h) runs on these.
constexpr int kResizePrecisionBits = 22;
struct ResizeAxisTaps {
  int ksize = 0;
  std::vector<int32_t> first, count;  // [out]
  std::vector<int32_t> w;             // [out, ksize]
};
ResizeAxisTaps resize_axis_taps(int in_size, int out_size);

// Crops the centered crop_w x crop_h window (top = (h - crop_h) / 2); zero-pads first when the
// image is smaller (torchvision center_crop).
RgbImage center_crop(const RgbImage& img, int crop_w, int crop_h);

// Rescale + normalize of an already resized/cropped image into out[3, H, W].
void normalize_to_chw(const RgbImage& img, const ImagePreprocessConfig& cfg, float* out /*[3,H,W]*/);

class ImagePreprocessor {
 public:
  explicit ImagePreprocessor(ImagePreprocessConfig cfg) : cfg_(std::move(cfg)) {}
  const ImagePreprocessConfig& config() const { return cfg_; }

  // The image right before rescale/normalize (padded, resized, cropped as configured).
  RgbImage prepare(const RgbImage& img) const;
  // pixel_values of one image: [3, H, W] with {H, W} = output_size_for(...).
  std::vector<float> preprocess(const RgbImage& img) const;

 private:
  ImagePreprocessConfig cfg_;
};

}  // namespace vlm
