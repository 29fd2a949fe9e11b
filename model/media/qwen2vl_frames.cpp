#include "model/media/qwen2vl_frames.h"

#include <algorithm>
#include <span>

#include "kernels/core/check.h"

namespace vlm {

bool frames8_fit(int in_w, int in_h, int out_w, int out_h) {
  auto ok = [](int64_t w, int64_t h) {
    return w > 0 && h > 0 && w <= kFrames8MaxSide && h <= kFrames8MaxSide && w * h <= kFrames8MaxPixels;
  };
  return ok(in_w, in_h) && ok(out_w, out_h) && ok(out_w, in_h);
}

MediaPixels qwen2vl_frames8(std::vector<RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, Modality modality) {
  const std::pair<int, int> hw = qwen2vl_output_size(frames, cfg);
  const int64_t n = static_cast<int64_t>(frames.size()), tp = cfg.temporal_patch_size;
  MediaPixels m;
  m.form = PixelForm::Frames8;
  m.modality = modality;
  m.height = hw.first;
  m.width = hw.second;
  m.grid_thw = {static_cast<int32_t>((n + tp - 1) / tp), hw.first / cfg.patch_size, hw.second / cfg.patch_size};
  m.num_frames = modality == Modality::Video ? static_cast<int32_t>(n) : 0;
  m.frames = std::move(frames);
  m.preprocess = cfg;
  return m;
}

std::vector<float> qwen2vl_frames_rows(const MediaPixels& item, int32_t t0, int32_t t1) {
  VLM_CHECK(item.is_frames8(), "qwen2vl_frames_rows of an item in the Rows form");
  const int64_t n = static_cast<int64_t>(item.frames.size()), tp = item.preprocess.temporal_patch_size;
  VLM_CHECK(n > 0 && 0 <= t0 && t0 < t1 && t1 <= item.grid_thw[0] && (n + tp - 1) / tp == item.grid_thw[0],
            "temporal groups {}..{} of {} ({} frames)", t0, t1, item.grid_thw[0], n);
  // The groups' frames; the last group repeats the last frame as qwen2vl_preprocess pads (a
  // span ending at the last frame pads the same way).
  const int64_t f0 = t0 * tp, f1 = std::min<int64_t>(t1 * tp, n);
  VisionPatches p = qwen2vl_preprocess(std::span<const RgbImage>(item.frames).subspan(f0, f1 - f0), item.preprocess);
  VLM_CHECK(p.grid_thw[0] == t1 - t0 && p.grid_thw[1] == item.grid_thw[1] && p.grid_thw[2] == item.grid_thw[2],
            "rows of grid {}x{}x{} for groups {}..{} of {}x{}x{}", p.grid_thw[0], p.grid_thw[1], p.grid_thw[2], t0, t1,
            item.grid_thw[0], item.grid_thw[1], item.grid_thw[2]);
  return std::move(p.pixels);
}

MediaPixels to_rows_form(const MediaPixels& item) {
  if (!item.is_frames8()) return item;
  MediaPixels m;
  m.form = PixelForm::Rows;
  m.data = qwen2vl_frames_rows(item, 0, item.grid_thw[0]);
  m.height = item.height;
  m.width = item.width;
  m.modality = item.modality;
  m.grid_thw = item.grid_thw;
  m.second_per_grid = item.second_per_grid;
  m.num_frames = item.num_frames;
  m.has_source_key = item.has_source_key;
  m.source_key = item.source_key;
  return m;
}

}  // namespace vlm
