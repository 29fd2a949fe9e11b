// MediaItemLoader: how a model family with images and videos turns a chat request's media parts
// into MediaPixels and prompt token counts. Implemented by Qwen2VLMediaLoader
// (server/media/qwen2vl_media_loader.h) and OnevisionMediaLoader
// (server/media/onevision_media_loader.h); ApiServer renders the chat template, loads every part
// through it and expands the placeholders (model/families/multimodal_input.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/scheduling/block_hash.h"
#include "model/families/multimodal_input.h"
#include "model/media/image_decode.h"
#include "model/media/media_pixels.h"
#include "model/media/video_sampling.h"
#include "server/media/media_fetch.h"

namespace vlm {

class MediaItemLoader {
 public:
  virtual ~MediaItemLoader() = default;
  // Throw RequestError (400, param `param`) for what cannot be fetched, decoded or preprocessed.
  // load_image = image_from_bytes(fetch_image_bytes(...)); the processed media cache
  // (server/media/processed_media_cache.h) keys on the bytes in between and image_preprocess_key().
  MediaPixels load_image(const std::string& url, const std::string& param) const {
    return image_from_bytes(fetch_image_bytes(url, param), param);
  }
  virtual MediaBytes fetch_image_bytes(const std::string& url, const std::string& param) const = 0;
  virtual MediaPixels image_from_bytes(const MediaBytes& bytes, const std::string& param) const = 0;
  // Identity of everything that changes an image's MediaPixels or whether it is accepted.
  virtual BlockHash image_preprocess_key() const = 0;
  virtual MediaPixels load_video(const std::vector<std::string>& frames, double fps,
                                 const std::string& param) const = 0;
  // One video file (a single URL), frames sampled per `sampling` (the request's keys over
  // default_sampling()).
  virtual MediaPixels load_video_file(const std::string& url, const VideoSamplingParams& sampling,
                                      const std::string& param) const = 0;
  // The checkpoint's frame-sampling defaults for video files.
  virtual VideoSamplingParams default_sampling() const = 0;
  // The prompt tokens of an item loaded here.
  virtual MediaTokens tokens(const MediaPixels& item) const = 0;
  // A family that writes a video as text-separated temporal groups (Qwen3-VL): the video's groups
  // as their own items (prompt order), each with the text the prompt holds before and after its
  // run of video tokens. Empty (the default): the video is one run of tokens, and `video` is left
  // as it was; otherwise `video` is taken apart (its frames or rows moved into the groups: a long
  // video's are not copied) and only the groups are to be used.
  struct VideoGroup {
    MediaPixels item;
    std::string before, after;
  };
  virtual std::vector<VideoGroup> video_groups(MediaPixels& /*video*/) const { return {}; }
  virtual int32_t image_token_id() const = 0;
  virtual int32_t video_token_id() const = 0;
  virtual bool accepts_video() const = 0;
};

// The frames of a video part, fetched and decoded: throws RequestError (400, param `param`) for
// no frames, more than max_frames, fps not in (0, 1000], frames of different sizes, and what
// fetch_image refuses. on_bytes (optional) sees each frame's fetched bytes, in order.
std::vector<RgbImage> fetch_video_frames(const std::vector<std::string>& frames, double fps, int max_frames,
                                         const MediaFetchOptions& fetch, const ImageLimits& limits,
                                         const std::string& param,
                                         const std::function<void(const MediaBytes&)>& on_bytes = {});

}  // namespace vlm
