#include "model/media/qwen2vl_frames.h"

#include <algorithm>
#include <span>

#include <fmt/format.h>

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
  return frames8_item(std::move(frames), cfg, modality, hw.first, hw.second);
}

MediaPixels frames8_item(std::vector<RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, Modality modality,
                         int out_h, int out_w) {
  if (frames.empty()) throw RequestError(400, "invalid_request_error", "a video needs at least one frame");
  for (const RgbImage& f : frames)
    if (f.width != frames[0].width || f.height != frames[0].height)
      throw RequestError(400, "invalid_request_error", "video frames differ in size");
  const int factor = cfg.patch_size * cfg.merge_size;
  if (out_h < factor || out_w < factor || out_h % factor != 0 || out_w % factor != 0)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("output size {}x{} is not a positive multiple of {}", out_w, out_h, factor));
  const int64_t n = static_cast<int64_t>(frames.size()), tp = cfg.temporal_patch_size;
  MediaPixels m;
  m.form = PixelForm::Frames8;
  m.modality = modality;
  m.height = out_h;
  m.width = out_w;
  m.grid_thw = {static_cast<int32_t>((n + tp - 1) / tp), out_h / cfg.patch_size, out_w / cfg.patch_size};
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
  VisionPatches p = qwen2vl_preprocess_to(std::span<const RgbImage>(item.frames).subspan(f0, f1 - f0), item.preprocess,
                                          item.height, item.width);
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
  m.group_seconds = item.group_seconds;
  m.video_group = item.video_group;
  m.has_source_key = item.has_source_key;
  m.source_key = item.source_key;
  return m;
}

}  // namespace vlm
