// Resampling facts follow Pillow's src/libImaging/Resample.c (precompute_coeffs,
// normalize_coeffs_8bpc, ImagingResampleInner); the post-resize arithmetic follows transformers
// 5.17's torchvision image-processor backend (center_crop, fused rescale_and_normalize).
#include "model/media/image_preprocess.h"
#include "model/decoder/json_file.h"
#include "model/media/processor_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

using nlohmann::json;

RgbImage blank(int w, int h) {
  RgbImage r;
  r.width = w;
  r.height = h;
  r.pixels.resize(static_cast<size_t>(w) * h * 3);
  return r;
}

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw LoadError(source + ": " + what);
}

int positive_int(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int>() <= 0)
    fail(source, std::string("missing or invalid '") + key + "'");
  return j[key].get<int>();
}

}  // namespace

std::pair<int, int> shortest_edge_size(int width, int height, int short_side) {
  if (width <= height)
    return {short_side, static_cast<int>(static_cast<double>(short_side) * height / width)};
  return {static_cast<int>(static_cast<double>(short_side) * width / height), short_side};
}

RgbImage pad_to_square(const RgbImage& img, std::array<uint8_t, 3> color) {
  if (img.width == img.height) return img;
  const int side = std::max(img.width, img.height);
  RgbImage out = blank(side, side);
  for (size_t i = 0; i < out.pixels.size(); i += 3)
    out.pixels[i] = color[0], out.pixels[i + 1] = color[1], out.pixels[i + 2] = color[2];
  const int x0 = (side - img.width) / 2, y0 = (side - img.height) / 2;
  for (int y = 0; y < img.height; ++y)
    std::copy(img.at(y, 0), img.at(y, 0) + img.width * 3, out.at(y0 + y, x0));
  return out;
}


RgbImage center_crop(const RgbImage& img, int crop_w, int crop_h) {
  VLM_CHECK(crop_w > 0 && crop_h > 0, "crop {}x{}", crop_w, crop_h);
  const RgbImage* src = &img;
  RgbImage padded;
  if (crop_w > img.width || crop_h > img.height) {  // torchvision: zero padding, left/top floored
    const int pw = std::max(crop_w, img.width), ph = std::max(crop_h, img.height);
    padded = blank(pw, ph);
    const int x0 = crop_w > img.width ? (crop_w - img.width) / 2 : 0;
    const int y0 = crop_h > img.height ? (crop_h - img.height) / 2 : 0;
    for (int y = 0; y < img.height; ++y)
      std::copy(img.at(y, 0), img.at(y, 0) + img.width * 3, padded.at(y0 + y, x0));
    src = &padded;
  }
  const int top = (src->height - crop_h) / 2, left = (src->width - crop_w) / 2;
  RgbImage out = blank(crop_w, crop_h);
  for (int y = 0; y < crop_h; ++y)
    std::copy(src->at(top + y, left), src->at(top + y, left) + crop_w * 3, out.at(y, 0));
  return out;
}

void normalize_to_chw(const RgbImage& img, const ImagePreprocessConfig& cfg, float* out) {
  const int64_t HW = static_cast<int64_t>(img.width) * img.height;
  float sub[3], div[3], mul = 1.0f;
  for (int c = 0; c < 3; ++c) {
    sub[c] = 0.0f, div[c] = 1.0f;
    if (cfg.do_normalize) {
      // transformers fuses the rescale into mean and std: f32(mean) * f32(1 / rescale_factor).
      const float inv = cfg.do_rescale ? static_cast<float>(1.0 / cfg.rescale_factor) : 1.0f;
      sub[c] = cfg.mean[c] * inv;
      div[c] = cfg.std[c] * inv;
    }
  }
  if (cfg.do_rescale && !cfg.do_normalize) mul = static_cast<float>(cfg.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    float* o = out + c * HW;
    for (int64_t i = 0; i < HW; ++i) {
      const float x = static_cast<float>(img.pixels[static_cast<size_t>(i) * 3 + c]);
      o[i] = cfg.do_normalize ? (x - sub[c]) / div[c] : x * mul;
    }
  }
}

ImagePreprocessConfig ImagePreprocessConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "not a JSON object");
  ImagePreprocessConfig c;
  auto flag = [&](const char* key, bool fallback) {
    return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
  };
  c.do_pad = flag("do_pad", false);
  c.do_resize = flag("do_resize", true);
  c.do_center_crop = flag("do_center_crop", true);
  c.do_rescale = flag("do_rescale", true);
  c.do_normalize = flag("do_normalize", true);
  if (j.contains("resample") && j["resample"].is_number_integer()) c.resample = j["resample"].get<int>();
  if (c.do_resize && c.resample != 3)
    fail(source, fmt::format("resample {} is not supported (only 3, bicubic)", c.resample));
  if (c.do_resize) {
    if (!j.contains("size") || !j["size"].is_object()) fail(source, "missing 'size'");
    const json& s = j["size"];
    if (s.contains("shortest_edge")) c.shortest_edge = positive_int(s, "shortest_edge", source);
    else c.resize_h = positive_int(s, "height", source), c.resize_w = positive_int(s, "width", source);
  }
  if (c.do_center_crop) {
    if (!j.contains("crop_size") || !j["crop_size"].is_object()) fail(source, "missing 'crop_size'");
    c.crop_h = positive_int(j["crop_size"], "height", source);
    c.crop_w = positive_int(j["crop_size"], "width", source);
  }
  if (j.contains("rescale_factor") && j["rescale_factor"].is_number())
    c.rescale_factor = j["rescale_factor"].get<double>();
  for (const char* key : {"image_mean", "image_std"}) {
    if (!j.contains(key)) continue;
    const json& v = j[key];
    if (!v.is_array() || v.size() != 3) fail(source, std::string("'") + key + "' must hold 3 numbers");
    auto& dst = std::string(key) == "image_mean" ? c.mean : c.std;
    for (int i = 0; i < 3; ++i) dst[i] = static_cast<float>(v[i].get<double>());
  }
  return c;
}

ImagePreprocessConfig ImagePreprocessConfig::load(const std::string& model_dir) {
  const ProcessorSettings s = image_processor_settings(model_dir);
  try {
    return from_json(s.json, s.source);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(s.source + ": " + e.what());
  }
}

std::pair<int, int> ImagePreprocessConfig::output_size_for(int width, int height) const {
  if (do_pad) width = height = std::max(width, height);
  if (do_resize) {
    if (shortest_edge > 0) std::tie(width, height) = shortest_edge_size(width, height, shortest_edge);
    else width = resize_w, height = resize_h;
  }
  if (do_center_crop) width = crop_w, height = crop_h;
  return {height, width};
}

RgbImage ImagePreprocessor::prepare(const RgbImage& img) const {
  RgbImage cur = img;
  if (cfg_.do_pad) {
    std::array<uint8_t, 3> color{};
    for (int c = 0; c < 3; ++c) color[c] = static_cast<uint8_t>(static_cast<int>(cfg_.mean[c] * 255.0));
    cur = pad_to_square(cur, color);
  }
  if (cfg_.do_resize) {
    auto [w, h] = cfg_.shortest_edge > 0 ? shortest_edge_size(cur.width, cur.height, cfg_.shortest_edge)
                                         : std::pair<int, int>{cfg_.resize_w, cfg_.resize_h};
    cur = resize_bicubic(cur, w, h);
  }
  if (cfg_.do_center_crop) cur = center_crop(cur, cfg_.crop_w, cfg_.crop_h);
  return cur;
}

std::vector<float> ImagePreprocessor::preprocess(const RgbImage& img) const {
  const RgbImage ready = prepare(img);
  std::vector<float> out(static_cast<size_t>(ready.width) * ready.height * 3);
  normalize_to_chw(ready, cfg_, out.data());
  return out;
}

}  // namespace vlm
