// Qwen3-VL's video preprocessing and timestamps (model/media/qwen3vl_video.h), restated from
// transformers 5.17's video_processing_qwen3_vl.py (smart_resize, resize) and
// processing_qwen3_vl.py (_calculate_timestamps, replace_video_token); no code taken.
#include "model/media/qwen3vl_video.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/media/image_preprocess.h"
#include "model/media/processor_config.h"
#include "model/media/qwen2vl_frames.h"

namespace vlm {

Qwen3VLVideoConfig Qwen3VLVideoConfig::from_json(const nlohmann::json& j, const std::string& source) {
  Qwen3VLVideoConfig c;
  c.base = Qwen2VLPreprocessConfig::from_json(j, source);
  auto fail = [&](const std::string& what) { return LoadError(source + ": " + what); };
  if (j.contains("cap_pixels_per_frame") && !j["cap_pixels_per_frame"].is_null()) {
    if (!j["cap_pixels_per_frame"].is_boolean()) throw fail("cap_pixels_per_frame must be a boolean");
    c.cap_pixels_per_frame = j["cap_pixels_per_frame"].get<bool>();
  }
  auto positive = [&](const char* key, auto& dst) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number() || j[key].get<double>() <= 0) throw fail(std::string(key) + " must be a positive number");
    dst = static_cast<std::remove_reference_t<decltype(dst)>>(j[key].get<double>());
  };
  positive("max_video_tokens", c.max_video_tokens);
  positive("fps", c.fps);
  positive("min_frames", c.min_frames);
  positive("max_frames", c.max_frames);
  return c;
}

Qwen3VLVideoConfig Qwen3VLVideoConfig::load(const std::string& model_dir) {
  std::optional<ProcessorSettings> s = find_processor_settings(model_dir, "video_preprocessor_config.json", "video_processor");
  if (!s) s = image_processor_settings(model_dir);
  try {
    return from_json(s->json, s->source);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(s->source + ": " + e.what());
  }
}

std::pair<int, int> qwen3vl_video_size(int num_frames, int height, int width, const Qwen3VLVideoConfig& cfg) {
  const Qwen2VLPreprocessConfig& b = cfg.base;
  const int64_t factor = int64_t{b.patch_size} * b.merge_size, tf = b.temporal_patch_size;
  auto bad = [](const std::string& m) { return RequestError(400, "invalid_request_error", m); };
  if (num_frames < tf) throw bad(fmt::format("a video needs at least {} frames, got {}", tf, num_frames));
  if (height < 10 || width < 10) throw bad(fmt::format("video frames {}x{} are smaller than 10 pixels", width, height));
  int64_t max_pixels = b.max_pixels;
  if (cfg.cap_pixels_per_frame) {
    const int64_t frame_cap = cfg.max_video_tokens * factor * factor;
    const int64_t per_frame = std::max(std::min(frame_cap, b.max_pixels / num_frames),
                                       static_cast<int64_t>(static_cast<double>(b.min_pixels) * 1.05));
    max_pixels = per_frame * num_frames;
  }
  double h = height, w = width;
  if (h < factor || w < factor) {  // int(height * scale) as Python
    const double scale = std::max(factor / h, factor / w);
    h = std::floor(h * scale);
    w = std::floor(w * scale);
  }
  if (std::max(h, w) / std::min(h, w) > 200) throw bad(fmt::format("video {}x{}: aspect ratio over 200", width, height));
  const double f = static_cast<double>(factor);
  auto py_round = [](double v) { return static_cast<int64_t>(std::nearbyint(v)); };  // half to even
  int64_t hb = py_round(h / f) * factor, wb = py_round(w / f) * factor;
  const int64_t tb = py_round(static_cast<double>(num_frames) / static_cast<double>(tf)) * tf;
  if (tb * hb * wb > max_pixels) {
    const double beta = std::sqrt(num_frames * h * w / static_cast<double>(max_pixels));
    hb = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    wb = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (tb * hb * wb < b.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(b.min_pixels) / (num_frames * h * w));
    hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {static_cast<int>(hb), static_cast<int>(wb)};
}

VisionPatches qwen3vl_preprocess_video(std::span<const RgbImage> frames, const Qwen3VLVideoConfig& cfg) {
  if (frames.empty()) throw RequestError(400, "invalid_request_error", "a video needs at least one frame");
  for (const RgbImage& f : frames)
    if (f.width != frames[0].width || f.height != frames[0].height)
      throw RequestError(400, "invalid_request_error", "video frames differ in size");
  Qwen2VLPreprocessConfig rows = cfg.base;
  if (!cfg.base.do_resize) return qwen2vl_preprocess(frames, rows);
  const std::pair<int, int> hw =
      qwen3vl_video_size(static_cast<int>(frames.size()), frames[0].height, frames[0].width, cfg);
  rows.do_resize = false;  // resized here to Qwen3-VL's size; the rest as Qwen2-VL's
  if (hw.first == frames[0].height && hw.second == frames[0].width) return qwen2vl_preprocess(frames, rows);
  std::vector<RgbImage> resized;
  resized.reserve(frames.size());
  for (const RgbImage& f : frames) resized.push_back(resize_bicubic(f, hw.second, hw.first));
  return qwen2vl_preprocess(resized, rows);
}

std::pair<int, int> qwen3vl_video_target(std::span<const RgbImage> frames, const Qwen3VLVideoConfig& cfg) {
  if (frames.empty()) throw RequestError(400, "invalid_request_error", "a video needs at least one frame");
  for (const RgbImage& f : frames)
    if (f.width != frames[0].width || f.height != frames[0].height)
      throw RequestError(400, "invalid_request_error", "video frames differ in size");
  if (!cfg.base.do_resize) return {frames[0].height, frames[0].width};
  return qwen3vl_video_size(static_cast<int>(frames.size()), frames[0].height, frames[0].width, cfg);
}

MediaPixels qwen3vl_video_frames8(std::vector<RgbImage> frames, const Qwen3VLVideoConfig& cfg) {
  const std::pair<int, int> hw = qwen3vl_video_target(frames, cfg);
  MediaPixels m = frames8_item(std::move(frames), cfg.base, Modality::Video, hw.first, hw.second);
  return m;
}

std::vector<int64_t> qwen3vl_sample_indices(int64_t total_frames, double video_fps, double fps, int64_t min_frames,
                                            int64_t max_frames) {
  if (total_frames < 1) throw RequestError(400, "invalid_request_error", "the video has no frames");
  if (!(video_fps > 0) || !(fps > 0))
    throw RequestError(400, "invalid_request_error",
                       fmt::format("video rate {} and sampling rate {} must be positive", video_fps, fps));
  int64_t n = static_cast<int64_t>(static_cast<double>(total_frames) / video_fps * fps);  // Python int(): toward 0
  n = std::min({std::max(n, min_frames), max_frames, total_frames});
  return qwen3vl_linspace_indices(total_frames, n);
}

std::vector<int64_t> qwen3vl_linspace_indices(int64_t total_frames, int64_t n) {
  VLM_CHECK(total_frames >= 1 && n >= 1, "{} indices of {} frames", n, total_frames);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    // numpy linspace: start + i * step (step = (stop - start) / (n - 1)), the last exactly stop.
    const double v = n == 1 ? 0.0
                     : i == n - 1 ? static_cast<double>(total_frames - 1)
                                  : static_cast<double>(i) * (static_cast<double>(total_frames - 1) / static_cast<double>(n - 1));
    out.push_back(static_cast<int64_t>(std::nearbyint(v)));  // numpy round: half to even
  }
  return out;
}

std::vector<double> qwen3vl_group_timestamps(std::span<const double> frame_seconds, int temporal_patch_size) {
  VLM_CHECK(!frame_seconds.empty() && temporal_patch_size > 0, "{} frames, temporal patch {}", frame_seconds.size(),
            temporal_patch_size);
  std::vector<double> t(frame_seconds.begin(), frame_seconds.end());
  while (t.size() % static_cast<size_t>(temporal_patch_size) != 0) t.push_back(t.back());
  std::vector<double> out;
  for (size_t i = 0; i < t.size(); i += static_cast<size_t>(temporal_patch_size))
    out.push_back((t[i] + t[i + static_cast<size_t>(temporal_patch_size) - 1]) / 2);
  return out;
}

std::vector<MediaPixels> qwen3vl_split_video(MediaPixels video, int temporal_patch_size) {
  const auto& g = video.grid_thw;
  VLM_CHECK(g[0] >= 1 && g[1] >= 1 && g[2] >= 1 && temporal_patch_size >= 1, "video grid ({}, {}, {})", g[0], g[1],
            g[2]);
  const size_t per = video.data.size() / static_cast<size_t>(g[0]);
  if (video.is_frames8()) {
    VLM_CHECK(video.preprocess.temporal_patch_size == temporal_patch_size && !video.frames.empty() &&
                  (static_cast<int64_t>(video.frames.size()) + temporal_patch_size - 1) / temporal_patch_size == g[0],
              "{} frames of temporal patch {} for {} temporal groups (split at {})", video.frames.size(),
              video.preprocess.temporal_patch_size, g[0], temporal_patch_size);
  } else {
    VLM_CHECK(per * static_cast<size_t>(g[0]) == video.data.size(), "{} values for {} temporal groups",
              video.data.size(), g[0]);
  }
  VLM_CHECK(video.group_seconds.empty() || static_cast<int32_t>(video.group_seconds.size()) == g[0],
            "{} timestamps for {} temporal groups", video.group_seconds.size(), g[0]);
  std::vector<MediaPixels> out;
  for (int32_t t = 0; t < g[0]; ++t) {
    MediaPixels m;
    if (video.is_frames8()) {
      const size_t f0 = static_cast<size_t>(t) * static_cast<size_t>(temporal_patch_size);
      const size_t f1 = std::min(f0 + static_cast<size_t>(temporal_patch_size), video.frames.size());
      m.form = PixelForm::Frames8;
      m.frames.assign(std::make_move_iterator(video.frames.begin() + static_cast<std::ptrdiff_t>(f0)),
                      std::make_move_iterator(video.frames.begin() + static_cast<std::ptrdiff_t>(f1)));
      m.preprocess = video.preprocess;
    } else {
      m.data.assign(video.data.begin() + static_cast<std::ptrdiff_t>(t * per),
                    video.data.begin() + static_cast<std::ptrdiff_t>((t + 1) * per));
    }
    m.height = video.height;
    m.width = video.width;
    m.modality = Modality::Video;
    m.grid_thw = {1, g[1], g[2]};
    m.second_per_grid = video.second_per_grid;
    m.num_frames = std::clamp(video.num_frames - t * temporal_patch_size, 1, temporal_patch_size);
    if (!video.group_seconds.empty()) m.group_seconds = {video.group_seconds[static_cast<size_t>(t)]};
    m.video_group = t;
    out.push_back(std::move(m));
  }
  return out;
}

std::string qwen3vl_timestamp_text(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "<%.1f seconds>", seconds);
  return buf;
}

}  // namespace vlm
