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
  check_frames_and_target(frames, cfg, out_h, out_w);
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

int64_t qwen2vl_item_tokens(const MediaPixels& item, int k, int patch_size, int temporal_patch_size, int merge_size,
                            int64_t patch_dim) {
  const auto& g = item.grid_thw;
  const int m = merge_size;
  auto bad = [&](const std::string& why) {
    throw RequestError(400, "invalid_request_error", fmt::format("{} {}: {}", modality_name(item.modality), k, why),
                       "messages");
  };
  if (item.modality != Modality::Image && item.modality != Modality::Video) bad("not an image or a video");
  if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[1] % m != 0 || g[2] % m != 0)
    bad(fmt::format("grid ({}, {}, {}) is not a positive multiple of the merge size {}", g[0], g[1], g[2], m));
  if (item.modality == Modality::Image && g[0] != 1) bad(fmt::format("an image has grid t = {}, not 1", g[0]));
  const int64_t P = static_cast<int64_t>(g[0]) * g[1] * g[2];
  if (item.is_frames8()) {  // 8-bit frames: what the rows will be made of must match the grid
    const Qwen2VLPreprocessConfig& c = item.preprocess;
    const int64_t n = static_cast<int64_t>(item.frames.size());
    if (c.patch_dim() != patch_dim || c.patch_size != patch_size || c.temporal_patch_size != temporal_patch_size ||
        c.merge_size != m)
      bad(fmt::format("frames preprocessed with patch {} / temporal patch {} / merge {}, the tower takes {} / {} / {}",
                      c.patch_size, c.temporal_patch_size, c.merge_size, patch_size, temporal_patch_size, m));
    if (n < 1 || (n + c.temporal_patch_size - 1) / c.temporal_patch_size != g[0] ||
        item.height != g[1] * c.patch_size || item.width != g[2] * c.patch_size)
      bad(fmt::format("{} frames resized to {}x{} for grid ({}, {}, {})", n, item.width, item.height, g[0], g[1], g[2]));
    for (const RgbImage& f : item.frames)
      if (f.width != item.frames[0].width || f.height != item.frames[0].height ||
          f.pixels.size() != static_cast<size_t>(f.width) * f.height * 3)
        bad("frames differ in size");
  } else if (static_cast<int64_t>(item.data.size()) != P * patch_dim) {
    bad(fmt::format("{} values for {} patches of {}", item.data.size(), P, patch_dim));
  }
  return P / (m * m);
}

}  // namespace vlm
