#include "server/media/image_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "server/media/media_item_loader.h"

namespace vlm {

ImageLoader::ImageLoader(MediaFetchOptions fetch, ImageLimits limits, ImagePreprocessConfig preprocess)
    : fetch_(std::move(fetch)), limits_(limits), preprocessor_(std::move(preprocess)) {
  fetch_.max_bytes = std::min(fetch_.max_bytes, limits_.max_bytes);
  Hasher128 h;
  h.add(0x6c6c617661ull);  // "llava"
  add_to_key(h, preprocessor_.config());
  add_to_key(h, limits_);
  preprocess_key_ = h.digest();
}

void add_double(Hasher128& h, double v) {
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof w);
  h.add(w);
}

void add_bytes(Hasher128& h, const MediaBytes& b) {
  h.add(static_cast<uint64_t>(b.data.size()));
  h.add_bytes(b.data.data(), b.data.size());
}

void set_source_key(MediaPixels& m, const Hasher128& h) {
  const BlockHash k = h.digest();
  m.has_source_key = true;
  m.source_key = {k.lo, k.hi};
}

void add_to_key(Hasher128& h, const ImagePreprocessConfig& c) {
  for (int v : {int(c.do_pad), int(c.do_resize), c.shortest_edge, c.resize_h, c.resize_w, c.resample,
                int(c.do_center_crop), c.crop_h, c.crop_w, int(c.do_rescale), int(c.do_normalize)})
    h.add(static_cast<uint64_t>(static_cast<uint32_t>(v)));
  add_double(h, c.rescale_factor);
  for (float v : c.mean) add_double(h, v);
  for (float v : c.std) add_double(h, v);
}

void add_to_key(Hasher128& h, const ImageLimits& limits) {
  h.add(static_cast<uint64_t>(limits.max_bytes)).add(static_cast<uint64_t>(limits.max_pixels));
}

RgbImage fetch_image(const std::string& url, const MediaFetchOptions& fetch, const ImageLimits& limits,
                     const std::string& param) {
  return decode_fetched_image(fetch_media(url, fetch, param), limits, param);
}

RgbImage decode_fetched_image(const MediaBytes& bytes, const ImageLimits& limits, const std::string& param) {
  try {
    return decode_image({reinterpret_cast<const uint8_t*>(bytes.data.data()), bytes.data.size()}, limits);
  } catch (const RequestError& e) {
    throw RequestError(e.status(), e.type(), e.what(), param);
  }
}

std::vector<RgbImage> fetch_video_frames(const std::vector<std::string>& frames, double fps, int max_frames,
                                         const MediaFetchOptions& fetch, const ImageLimits& limits,
                                         const std::string& param,
                                         const std::function<void(const MediaBytes&)>& on_bytes) {
  auto bad = [&](const std::string& msg) { return RequestError(400, "invalid_request_error", msg, param); };
  if (frames.empty()) throw bad("a video needs at least one frame");
  if (static_cast<int64_t>(frames.size()) > max_frames)
    throw bad(fmt::format("the video has {} frames; at most {} are allowed (--max-video-frames)", frames.size(),
                          max_frames));
  if (!(std::isfinite(fps) && fps > 0 && fps <= 1000)) throw bad(fmt::format("fps must be in (0, 1000], got {}", fps));
  std::vector<RgbImage> rgb;
  rgb.reserve(frames.size());
  for (size_t f = 0; f < frames.size(); ++f) {
    const MediaBytes bytes = fetch_media(frames[f], fetch, param);
    if (on_bytes) on_bytes(bytes);
    rgb.push_back(decode_fetched_image(bytes, limits, param));
    if (rgb.back().width != rgb.front().width || rgb.back().height != rgb.front().height)
      throw bad(fmt::format("video frame {} is {}x{} pixels, frame 0 is {}x{}: all frames must have one size", f,
                            rgb.back().width, rgb.back().height, rgb.front().width, rgb.front().height));
  }
  return rgb;
}

ImagePixels ImageLoader::load(const std::string& url, const std::string& param) const {
  return image_from_bytes(fetch_image_bytes(url, param), param);
}

MediaBytes ImageLoader::fetch_image_bytes(const std::string& url, const std::string& param) const {
  return fetch_media(url, fetch_, param);
}

ImagePixels ImageLoader::image_from_bytes(const MediaBytes& bytes, const std::string& param) const {
  const RgbImage rgb = decode_fetched_image(bytes, limits_, param);
  const auto [h, w] = preprocessor_.config().output_size_for(rgb.width, rgb.height);
  ImagePixels out;
  out.data = preprocessor_.preprocess(rgb);
  out.height = h;
  out.width = w;
  VLM_CHECK(out.data.size() == static_cast<size_t>(3) * h * w, "preprocess gave {} values for 3x{}x{}",
            out.data.size(), h, w);
  return out;
}

}  // namespace vlm
