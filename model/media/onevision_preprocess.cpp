#include "model/media/onevision_preprocess.h"
#include "model/media/processor_config.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/decoder/json_file.h"

namespace vlm {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) { throw LoadError(source + ": " + what); }


void append_tile(const RgbImage& tile, const ImagePreprocessConfig& norm, std::vector<float>& data) {
  const size_t at = data.size();
  data.resize(at + static_cast<size_t>(tile.width) * tile.height * 3);
  normalize_to_chw(tile, norm, data.data() + at);
}

RgbImage crop(const RgbImage& img, int x0, int y0, int w, int h) {
  RgbImage out;
  out.width = w, out.height = h;
  out.pixels.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) std::copy(img.at(y0 + y, x0), img.at(y0 + y, x0) + w * 3, out.at(y, 0));
  return out;
}

}  // namespace

json read_processor_section(const std::string& model_dir, const std::string& key) {
  const std::string file = key == "video_processor" ? "video_preprocessor_config.json" : "preprocessor_config.json";
  if (auto s = find_processor_settings(model_dir, file, key)) return std::move(s->json);
  const std::string separate = model_dir + "/" + file, combined = model_dir + "/processor_config.json";
  throw LoadError(fmt::format("{}: no {} (neither {} nor a \"{}\" section in {})", model_dir, key, separate, key,
                              combined));
}

OnevisionPreprocessConfig OnevisionPreprocessConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "not a JSON object");
  OnevisionPreprocessConfig c;
  json norm = j;  // ImagePreprocessConfig reads the flags, mean and std; no resize or crop there
  norm["do_resize"] = false;
  norm["do_center_crop"] = false;
  norm["do_pad"] = false;
  c.norm = ImagePreprocessConfig::from_json(norm, source);
  if (j.contains("resample") && j["resample"].is_number_integer() && j["resample"].get<int>() != 3)
    fail(source, fmt::format("resample {} is not supported (only 3, bicubic)", j["resample"].get<int>()));
  if (j.contains("size") && j["size"].is_object()) {
    const json& s = j["size"];
    if (!s.contains("height") || !s.contains("width") || s["height"] != s["width"] || !s["height"].is_number_integer())
      fail(source, "size must be a square {height, width}");
    c.size = s["height"].get<int>();
  }
  if (c.size <= 0) fail(source, "size must be positive");
  if (j.contains("image_grid_pinpoints")) {
    for (const json& p : j["image_grid_pinpoints"]) {
      if (!p.is_array() || p.size() != 2) fail(source, "image_grid_pinpoints entries must be [height, width]");
      const Resolution r{p[0].get<int>(), p[1].get<int>()};
      if (r.height <= 0 || r.width <= 0 || r.height % c.size != 0 || r.width % c.size != 0)
        fail(source, fmt::format("grid pinpoint {}x{} is not a multiple of the size {}", r.height, r.width, c.size));
      c.grid_pinpoints.push_back(r);
    }
  }
  return c;
}

OnevisionPreprocessConfig OnevisionPreprocessConfig::load(const std::string& model_dir, bool video) {
  const std::string key = video ? "video_processor" : "image_processor";
  OnevisionPreprocessConfig c = from_json(read_processor_section(model_dir, key), model_dir + " (" + key + ")");
  if (!video && c.grid_pinpoints.empty()) throw LoadError(model_dir + " (image_processor): no image_grid_pinpoints");
  return c;
}

MediaPixels preprocess_onevision_image(const RgbImage& img, const OnevisionPreprocessConfig& cfg) {
  VLM_CHECK(!cfg.grid_pinpoints.empty() && img.width > 0 && img.height > 0, "AnyRes of {}x{} with {} pinpoints",
            img.width, img.height, cfg.grid_pinpoints.size());
  const int S = cfg.size;
  MediaPixels m;
  m.modality = Modality::Image;
  m.height = img.height;
  m.width = img.width;
  append_tile(resize_bicubic(img, S, S), cfg.norm, m.data);
  const Resolution best = select_best_resolution({img.height, img.width}, cfg.grid_pinpoints);
  const Resolution fit = patch_output_size({img.height, img.width}, best);
  const RgbImage resized = resize_bicubic(img, fit.width, fit.height);
  RgbImage canvas;  // black, the pinpoint's size
  canvas.width = best.width, canvas.height = best.height;
  canvas.pixels.assign(static_cast<size_t>(best.width) * best.height * 3, 0);
  const int x0 = (best.width - fit.width) / 2, y0 = (best.height - fit.height) / 2;
  for (int y = 0; y < fit.height; ++y)
    std::copy(resized.at(y, 0), resized.at(y, 0) + fit.width * 3, canvas.at(y0 + y, x0));
  for (int ty = 0; ty < best.height; ty += S)
    for (int tx = 0; tx < best.width; tx += S) append_tile(crop(canvas, tx, ty, S, S), cfg.norm, m.data);
  return m;
}

MediaPixels preprocess_onevision_video(const std::vector<RgbImage>& frames, const OnevisionPreprocessConfig& cfg) {
  VLM_CHECK(!frames.empty(), "a video without frames");
  MediaPixels m;
  m.modality = Modality::Video;
  m.height = m.width = cfg.size;
  m.num_frames = static_cast<int32_t>(frames.size());
  for (const RgbImage& f : frames) append_tile(resize_bicubic(f, cfg.size, cfg.size), cfg.norm, m.data);
  return m;
}

}  // namespace vlm
