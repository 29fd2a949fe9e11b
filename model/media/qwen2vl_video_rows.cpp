#include "model/media/qwen2vl_video_rows.h"

#include <algorithm>
#include <span>
#include <utility>

#include "kernels/core/check.h"
#include "kernels/core/populated_vector.h"
#include "model/media/image_preprocess.h"
#include "model/media/media_thread_pool.h"
#include "model/media/video_sampling.h"

namespace vlm {

Qwen2VLVideoRows::Qwen2VLVideoRows(Qwen2VLPreprocessConfig cfg, int64_t total_pixels)
    : cfg_(std::move(cfg)), total_pixels_(total_pixels) {}

void Qwen2VLVideoRows::begin(const VideoInfo& info, int64_t num_picked) {
  VLM_CHECK(num_picked > 0, "Qwen2VLVideoRows::begin with {} frames", num_picked);
  if (total_pixels_ > 0)
    cfg_.max_pixels = std::min(cfg_.max_pixels, video_frame_max_pixels(cfg_.min_pixels, cfg_.max_pixels, total_pixels_,
                                                                       num_picked, cfg_.temporal_patch_size));
  RgbImage shape;  // qwen2vl_output_size reads the size only
  shape.width = info.width;
  shape.height = info.height;
  const std::pair<int, int> hw = qwen2vl_output_size(std::span<const RgbImage>(&shape, 1), cfg_);
  out_h_ = hw.first;
  out_w_ = hw.second;
  lut_ = qwen2vl_normalize_table(cfg_);
  num_frames_ = num_picked;
  in_w_ = info.width;
  in_h_ = info.height;
  free_.clear();
  const int64_t tp = cfg_.temporal_patch_size, ps = cfg_.patch_size;
  const int64_t gt = (num_picked + tp - 1) / tp, gh = out_h_ / ps, gw = out_w_ / ps;
  out_.grid_thw = {static_cast<int32_t>(gt), static_cast<int32_t>(gh), static_cast<int32_t>(gw)};
  group_size_ = gh * gw * cfg_.patch_dim();
  out_.pixels.clear();
  resize_populated(out_.pixels, static_cast<size_t>(gt * group_size_), &media_thread_pool());
}

void Qwen2VLVideoRows::frame(int64_t k, const RgbImage& rgb) {
  VLM_CHECK(k >= 0 && k < num_frames_, "frame {} of {}", k, num_frames_);
  const int64_t tp = cfg_.temporal_patch_size;
  const bool same = rgb.width == out_w_ && rgb.height == out_h_;
  std::unique_ptr<Resize> r;
  if (!same) {
    VLM_CHECK(rgb.width == in_w_ && rgb.height == in_h_, "frame {}x{}, the stream's {}x{}", rgb.width, rgb.height, in_w_,
              in_h_);
    {
      std::lock_guard<std::mutex> lock(free_mu_);
      if (!free_.empty()) {
        r = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!r) r = std::make_unique<Resize>(in_w_, in_h_, out_w_, out_h_);
    r->resizer.resize(rgb, r->frame);  // already on a pool thread: this thread only
  }
  const RgbImage& f = same ? rgb : r->frame;
  float* group = out_.pixels.data() + (k / tp) * group_size_;
  qwen2vl_write_frame_rows(f, static_cast<int>(k % tp), cfg_, lut_, group);
  if (k == num_frames_ - 1)  // pad: the last frame repeated into the last group's remaining slots
    for (int64_t ft = k % tp + 1; ft < tp; ++ft) qwen2vl_write_frame_rows(f, static_cast<int>(ft), cfg_, lut_, group);
  if (r) {
    std::lock_guard<std::mutex> lock(free_mu_);
    free_.push_back(std::move(r));
  }
}

VisionPatches Qwen2VLVideoRows::take() {
  VisionPatches out = std::move(out_);
  out_ = VisionPatches{};
  return out;
}

}  // namespace vlm
