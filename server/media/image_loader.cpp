#include "server/media/image_loader.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "server/media/media_item_loader.h"

namespace vlm {

ImageLoader::ImageLoader(MediaFetchOptions fetch, ImageLimits limits, ImagePreprocessConfig preprocess)
    : fetch_(std::move(fetch)), limits_(limits), preprocessor_(std::move(preprocess)) {
  fetch_.max_bytes = std::min(fetch_.max_bytes, limits_.max_bytes);
}

RgbImage fetch_image(const std::string& url, const MediaFetchOptions& fetch, const ImageLimits& limits,
                     const std::string& param) {
  const MediaBytes bytes = fetch_media(url, fetch, param);
  try {
    return decode_image({reinterpret_cast<const uint8_t*>(bytes.data.data()), bytes.data.size()}, limits);
  } catch (const RequestError& e) {
    throw RequestError(e.status(), e.type(), e.what(), param);
  }
}

std::vector<RgbImage> fetch_video_frames(const std::vector<std::string>& frames, double fps, int max_frames,
                                         const MediaFetchOptions& fetch, const ImageLimits& limits,
                                         const std::string& param) {
  auto bad = [&](const std::string& msg) { return RequestError(400, "invalid_request_error", msg, param); };
  if (frames.empty()) throw bad("a video needs at least one frame");
  if (static_cast<int64_t>(frames.size()) > max_frames)
    throw bad(fmt::format("the video has {} frames; at most {} are allowed (--max-video-frames)", frames.size(),
                          max_frames));
  if (!(std::isfinite(fps) && fps > 0 && fps <= 1000)) throw bad(fmt::format("fps must be in (0, 1000], got {}", fps));
  std::vector<RgbImage> rgb;
  rgb.reserve(frames.size());
  for (size_t f = 0; f < frames.size(); ++f) {
    rgb.push_back(fetch_image(frames[f], fetch, limits, param));
    if (rgb.back().width != rgb.front().width || rgb.back().height != rgb.front().height)
      throw bad(fmt::format("video frame {} is {}x{} pixels, frame 0 is {}x{}: all frames must have one size", f,
                            rgb.back().width, rgb.back().height, rgb.front().width, rgb.front().height));
  }
  return rgb;
}

ImagePixels ImageLoader::load(const std::string& url, const std::string& param) const {
  const RgbImage rgb = fetch_image(url, fetch_, limits_, param);
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
