// Restated from transformers 5.17 (models/qwen2_vl/image_processing_qwen2_vl.py,
// video_processing_qwen2_vl.py: smart_resize, the patchify reshape/permute); no code taken.
#include "model/media/qwen2vl_preprocess.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/populated_vector.h"
#include "model/media/image_preprocess.h"
#include "model/media/media_thread_pool.h"
#include "model/media/processor_config.h"

namespace vlm {

Qwen2VLPreprocessConfig Qwen2VLPreprocessConfig::from_json(const nlohmann::json& j, const std::string& source) {
  auto fail = [&](const std::string& what) { return LoadError(source + ": " + what); };
  if (!j.is_object()) throw fail("not a JSON object");
  Qwen2VLPreprocessConfig c;
  auto get_int = [&](const nlohmann::json& o, const char* key, auto& dst) {
    if (o.contains(key) && o[key].is_number()) dst = static_cast<std::remove_reference_t<decltype(dst)>>(o[key].get<double>());
  };
  get_int(j, "min_pixels", c.min_pixels);
  get_int(j, "max_pixels", c.max_pixels);
  if (j.contains("size") && j["size"].is_object()) {
    get_int(j["size"], "shortest_edge", c.min_pixels);
    get_int(j["size"], "longest_edge", c.max_pixels);
  }
  get_int(j, "patch_size", c.patch_size);
  get_int(j, "temporal_patch_size", c.temporal_patch_size);
  get_int(j, "merge_size", c.merge_size);
  c.do_resize = j.value("do_resize", true);
  c.do_rescale = j.value("do_rescale", true);
  c.do_normalize = j.value("do_normalize", true);
  if (j.contains("rescale_factor") && j["rescale_factor"].is_number()) c.rescale_factor = j["rescale_factor"].get<double>();
  for (const char* key : {"image_mean", "image_std"})
    if (j.contains(key) && j[key].is_array() && j[key].size() == 3)
      for (int i = 0; i < 3; ++i) (key[6] == 'm' ? c.mean : c.std)[i] = j[key][i].get<float>();
  if (j.value("resample", 3) != 3) throw fail("only bicubic resampling (3) is supported");
  if (c.min_pixels <= 0 || c.max_pixels < c.min_pixels || c.patch_size <= 0 || c.temporal_patch_size <= 0 ||
      c.merge_size <= 0)
    throw fail("invalid min/max pixels, patch, temporal patch or merge size");
  return c;
}

Qwen2VLPreprocessConfig Qwen2VLPreprocessConfig::load(const std::string& model_dir, bool video) {
  std::optional<ProcessorSettings> s;
  if (video) s = find_processor_settings(model_dir, "video_preprocessor_config.json", "video_processor");
  if (!s) s = image_processor_settings(model_dir);
  try {
    return from_json(s->json, s->source);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(s->source + ": " + e.what());
  }
}

std::pair<int, int> smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels) {
  if (height < 10 || width < 10)
    throw RequestError(400, "invalid_request_error", fmt::format("image {}x{} is smaller than 10 pixels", width, height));
  if (static_cast<double>(std::max(height, width)) / std::min(height, width) > 200)
    throw RequestError(400, "invalid_request_error", fmt::format("image {}x{}: aspect ratio over 200", width, height));
  const double f = factor;
  auto round_even = [&](double v) { return static_cast<int64_t>(std::nearbyint(v / f)) * factor; };  // Python round
  int64_t h = round_even(height), w = round_even(width);
  if (h * w > max_pixels) {
    const double beta = std::sqrt(static_cast<double>(height) * width / static_cast<double>(max_pixels));
    h = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(height / beta / f)) * factor);
    w = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(width / beta / f)) * factor);
  } else if (h * w < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (static_cast<double>(height) * width));
    h = static_cast<int64_t>(std::ceil(height * beta / f)) * factor;
    w = static_cast<int64_t>(std::ceil(width * beta / f)) * factor;
  }
  return {static_cast<int>(h), static_cast<int>(w)};
}

namespace {

ImagePreprocessConfig normalize_config(const Qwen2VLPreprocessConfig& cfg) {
  ImagePreprocessConfig norm;
  norm.do_rescale = cfg.do_rescale;
  norm.rescale_factor = cfg.rescale_factor;
  norm.do_normalize = cfg.do_normalize;
  norm.mean = cfg.mean;
  norm.std = cfg.std;
  return norm;
}

}  // namespace

Qwen2VLNormalizeTable qwen2vl_normalize_table(const Qwen2VLPreprocessConfig& cfg) {
  RgbImage levels;
  levels.width = 256;
  levels.height = 1;
  levels.pixels.resize(256 * 3);
  for (int v = 0; v < 256; ++v)
    for (int c = 0; c < 3; ++c) levels.pixels[static_cast<size_t>(v) * 3 + c] = static_cast<uint8_t>(v);
  float chw[3 * 256];
  normalize_to_chw(levels, normalize_config(cfg), chw);
  Qwen2VLNormalizeTable lut{};
  for (int c = 0; c < 3; ++c) std::copy(chw + c * 256, chw + (c + 1) * 256, lut[static_cast<size_t>(c)].begin());
  return lut;
}

std::pair<int, int> qwen2vl_output_size(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg) {
  if (frames.empty()) throw RequestError(400, "invalid_request_error", "a video needs at least one frame");
  for (const RgbImage& f : frames)
    if (f.width != frames[0].width || f.height != frames[0].height)
      throw RequestError(400, "invalid_request_error", "video frames differ in size");
  const int ps = cfg.patch_size, ms = cfg.merge_size;
  int h = frames[0].height, w = frames[0].width;
  if (cfg.do_resize) std::tie(h, w) = smart_resize(h, w, ps * ms, cfg.min_pixels, cfg.max_pixels);
  if (h % (ps * ms) != 0 || w % (ps * ms) != 0)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("image {}x{} is not a multiple of {} (resizing is off)", w, h, ps * ms));
  return {h, w};
}

VisionPatches qwen2vl_preprocess_ref(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg) {
  const auto [h, w] = qwen2vl_output_size(frames, cfg);
  const int ps = cfg.patch_size, ms = cfg.merge_size, tp = cfg.temporal_patch_size;
  const ImagePreprocessConfig norm = normalize_config(cfg);
  const int64_t n = static_cast<int64_t>(frames.size());
  const int64_t T = (n + tp - 1) / tp * tp;  // padded frame count
  const int64_t HW = static_cast<int64_t>(h) * w;
  std::vector<float> chw(static_cast<size_t>(n * 3 * HW));  // [n, 3, h, w]
  for (int64_t i = 0; i < n; ++i) {
    const RgbImage& f = frames[static_cast<size_t>(i)];
    if (f.width == w && f.height == h) normalize_to_chw(f, norm, chw.data() + i * 3 * HW);
    else normalize_to_chw(resize_bicubic(f, w, h), norm, chw.data() + i * 3 * HW);
  }
  const int64_t gt = T / tp, gh = h / ps, gw = w / ps;
  VisionPatches out;
  out.grid_thw = {static_cast<int32_t>(gt), static_cast<int32_t>(gh), static_cast<int32_t>(gw)};
  const int64_t K = cfg.patch_dim();
  out.pixels.resize(static_cast<size_t>(gt * gh * gw * K));
  float* row = out.pixels.data();
  for (int64_t t = 0; t < gt; ++t)
    for (int64_t by = 0; by < gh / ms; ++by)
      for (int64_t bx = 0; bx < gw / ms; ++bx)
        for (int64_t my = 0; my < ms; ++my)
          for (int64_t mx = 0; mx < ms; ++mx, row += K) {
            const int64_t y0 = (by * ms + my) * ps, x0 = (bx * ms + mx) * ps;
            float* dst = row;
            for (int64_t c = 0; c < 3; ++c)
              for (int64_t ft = 0; ft < tp; ++ft) {
                const int64_t frame = std::min(t * tp + ft, n - 1);  // pad: repeat the last frame
                const float* src = chw.data() + (frame * 3 + c) * HW;
                for (int64_t ky = 0; ky < ps; ++ky, dst += ps)
                  std::copy(src + (y0 + ky) * w + x0, src + (y0 + ky) * w + x0 + ps, dst);
              }
          }
  return out;
}

void qwen2vl_write_frame_rows(const RgbImage& frame, int ft, const Qwen2VLPreprocessConfig& cfg,
                              const Qwen2VLNormalizeTable& lut, float* group_rows) {
  const int64_t ps = cfg.patch_size, ms = cfg.merge_size, tp = cfg.temporal_patch_size;
  const int64_t gh = frame.height / ps, gw = frame.width / ps;
  const int64_t K = cfg.patch_dim();
  float* row = group_rows;
  for (int64_t by = 0; by < gh / ms; ++by)
    for (int64_t bx = 0; bx < gw / ms; ++bx)
      for (int64_t my = 0; my < ms; ++my)
        for (int64_t mx = 0; mx < ms; ++mx, row += K) {
          const int64_t y0 = (by * ms + my) * ps, x0 = (bx * ms + mx) * ps;
          for (int64_t c = 0; c < 3; ++c) {
            const float* table = lut[static_cast<size_t>(c)].data();
            float* dst = row + (c * tp + ft) * ps * ps;
            for (int64_t ky = 0; ky < ps; ++ky, dst += ps) {
              const uint8_t* p = frame.at(static_cast<int>(y0 + ky), static_cast<int>(x0)) + c;
              for (int64_t kx = 0; kx < ps; ++kx) dst[kx] = table[p[kx * 3]];
            }
          }
        }
}

VisionPatches qwen2vl_preprocess(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg) {
  const std::pair<int, int> hw = qwen2vl_output_size(frames, cfg);
  return qwen2vl_preprocess_to(frames, cfg, hw.first, hw.second);
}

void check_frames_and_target(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, int out_h,
                             int out_w) {
  if (frames.empty()) throw RequestError(400, "invalid_request_error", "a video needs at least one frame");
  for (const RgbImage& f : frames)
    if (f.width != frames[0].width || f.height != frames[0].height)
      throw RequestError(400, "invalid_request_error", "video frames differ in size");
  const int factor = cfg.patch_size * cfg.merge_size;
  if (out_h < factor || out_w < factor || out_h % factor != 0 || out_w % factor != 0)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("output size {}x{} is not a positive multiple of {}", out_w, out_h, factor));
}

VisionPatches qwen2vl_preprocess_to(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, int out_h,
                                    int out_w) {
  check_frames_and_target(frames, cfg, out_h, out_w);
  const int h = out_h, w = out_w;  // plain locals: the pool's lambda captures them (clang 14 refuses structured bindings there)
  const int ps = cfg.patch_size, tp = cfg.temporal_patch_size;
  // Rescale + normalize as a table per channel: a pixel is one of 256 levels, and each entry is
  // computed with normalize_to_chw's float operations, so the rows are bit-identical to
  // normalizing whole frames first (qwen2vl_preprocess_ref).
  const Qwen2VLNormalizeTable lut = qwen2vl_normalize_table(cfg);
  const int64_t n = static_cast<int64_t>(frames.size());
  const int64_t T = (n + tp - 1) / tp * tp;  // padded frame count
  const int64_t gt = T / tp, gh = h / ps, gw = w / ps;
  VisionPatches out;
  out.grid_thw = {static_cast<int32_t>(gt), static_cast<int32_t>(gh), static_cast<int32_t>(gw)};
  const int64_t K = cfg.patch_dim();
  const int64_t rows_per_t = gh * gw;
  ThreadPool& pool = media_thread_pool();
  resize_populated(out.pixels, static_cast<size_t>(gt * rows_per_t * K), &pool);
  // One task per temporal patch: resize its tp frames (none when the size is already right),
  // then write its rows straight from the 8-bit pixels through the table.
  pool.parallel_for(gt, [&](int64_t t_begin, int64_t t_end) {
    RgbImage resized;
    for (int64_t t = t_begin; t < t_end; ++t)
      for (int64_t ft = 0; ft < tp; ++ft) {
        const RgbImage& f = frames[static_cast<size_t>(std::min(t * tp + ft, n - 1))];  // pad: repeat the last
        const bool same = f.width == w && f.height == h;
        if (!same) resized = resize_bicubic(f, w, h, nullptr);  // one thread per task
        qwen2vl_write_frame_rows(same ? f : resized, static_cast<int>(ft), cfg, lut,
                                 out.pixels.data() + t * rows_per_t * K);
      }
  });
  return out;
}

}  // namespace vlm
