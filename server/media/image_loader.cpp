#include "server/media/image_loader.h"

#include <algorithm>

#include "kernels/core/check.h"

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
