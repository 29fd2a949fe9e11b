#include "server/media/qwen2vl_media_loader.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "server/media/image_loader.h"

namespace vlm {

Qwen2VLMediaLoader::Qwen2VLMediaLoader(MediaFetchOptions fetch, ImageLimits limits, Qwen2VLMediaOptions options)
    : fetch_(std::move(fetch)), limits_(limits), options_(std::move(options)) {
  fetch_.max_bytes = std::min(fetch_.max_bytes, limits_.max_bytes);
}

namespace {

MediaPixels to_media(VisionPatches&& p, Modality modality, const Qwen2VLPreprocessConfig& cfg) {
  MediaPixels m;
  m.data = std::move(p.pixels);
  m.grid_thw = p.grid_thw;
  m.height = p.grid_thw[1] * cfg.patch_size;
  m.width = p.grid_thw[2] * cfg.patch_size;
  m.modality = modality;
  return m;
}

// The preprocessing's RequestErrors name no parameter: name the part's.
template <typename F>
auto with_param(const std::string& param, F&& f) {
  try {
    return f();
  } catch (const RequestError& e) {
    throw RequestError(e.status(), e.type(), e.what(), param);
  }
}

}  // namespace

MediaPixels Qwen2VLMediaLoader::load_image(const std::string& url, const std::string& param) const {
  const RgbImage rgb = fetch_image(url, fetch_, limits_, param);
  return with_param(param, [&] {
    return to_media(qwen2vl_preprocess(std::span<const RgbImage>(&rgb, 1), options_.image), Modality::Image,
                    options_.image);
  });
}

MediaPixels Qwen2VLMediaLoader::load_video(const std::vector<std::string>& frames, double fps,
                                           const std::string& param) const {
  if (!options_.accepts_video)
    throw RequestError(400, "invalid_request_error", "this model does not accept video input", param);
  const std::vector<RgbImage> rgb = fetch_video_frames(frames, fps, options_.max_video_frames, fetch_, limits_, param);
  MediaPixels m = with_param(param, [&] {
    return to_media(qwen2vl_preprocess(rgb, options_.video), Modality::Video, options_.video);
  });
  m.num_frames = static_cast<int32_t>(frames.size());
  m.second_per_grid = static_cast<float>(options_.video.temporal_patch_size / fps);
  return m;
}

MediaTokens Qwen2VLMediaLoader::tokens(const MediaPixels& item) const {
  const Qwen2VLPreprocessConfig& cfg = item.modality == Modality::Video ? options_.video : options_.image;
  const int64_t mm = static_cast<int64_t>(cfg.merge_size) * cfg.merge_size;
  const auto& g = item.grid_thw;
  const int64_t per_frame = static_cast<int64_t>(g[1]) * g[2] / mm;
  return MediaTokens{item.modality, per_frame * g[0], per_frame};
}

}  // namespace vlm
