#include "server/media/onevision_media_loader.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "server/media/image_loader.h"

namespace vlm {

OnevisionMediaLoader::OnevisionMediaLoader(MediaFetchOptions fetch, ImageLimits limits, OnevisionMediaOptions options)
    : fetch_(std::move(fetch)), limits_(limits), options_(std::move(options)) {
  fetch_.max_bytes = std::min(fetch_.max_bytes, limits_.max_bytes);
  Hasher128 h;
  h.add(0x6f6e65766973ull);  // "onevis"
  h.add(static_cast<uint64_t>(options_.image.size));
  for (const Resolution& r : options_.image.grid_pinpoints)
    h.add(static_cast<uint64_t>(r.height)).add(static_cast<uint64_t>(r.width));
  add_to_key(h, options_.image.norm);
  add_to_key(h, limits_);
  preprocess_key_ = h.digest();
}

MediaBytes OnevisionMediaLoader::fetch_image_bytes(const std::string& url, const std::string& param) const {
  return fetch_media(url, fetch_, param);
}

MediaPixels OnevisionMediaLoader::image_from_bytes(const MediaBytes& bytes, const std::string& param) const {
  return preprocess_onevision_image(decode_fetched_image(bytes, limits_, param), options_.image);
}

MediaPixels OnevisionMediaLoader::load_video(const std::vector<std::string>& frames, double fps,
                                             const std::string& param) const {
  return preprocess_onevision_video(
      fetch_video_frames(frames, fps, options_.max_video_frames, fetch_, limits_, param), options_.video);
}

MediaPixels OnevisionMediaLoader::load_video_file(const std::string&, const VideoSamplingParams&,
                                                  const std::string& param) const {
  throw RequestError(400, "invalid_request_error",
                     param + ": this model takes a video as a list of frame URLs (\"url\": [frame0, frame1, ...]); "
                             "video files are decoded for the Qwen2-VL family only",
                     param);
}

MediaTokens OnevisionMediaLoader::tokens(const MediaPixels& item) const {
  if (item.modality == Modality::Video) {
    const int64_t per_frame = pooled_frame_tokens(options_.grid);
    return MediaTokens{Modality::Video, item.num_frames * per_frame + 1, per_frame};
  }
  const int64_t n = anyres_layout({item.height, item.width}, options_.image.grid_pinpoints, options_.image.size,
                                  options_.grid, options_.max_num_patches)
                        .num_tokens();
  return MediaTokens{Modality::Image, n, n};
}

}  // namespace vlm
