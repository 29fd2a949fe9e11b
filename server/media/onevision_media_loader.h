// OnevisionMediaLoader: the image and video parts of a chat request -> MediaPixels for
// LLaVA-OneVision (model/families/llava_onevision.h). Fetches and decodes each URL as the other
// loaders do (server/media/image_loader.h), then preprocesses it as the checkpoint's processor
// files say (model/media/onevision_preprocess.h: AnyRes tiles for images, S x S frames for
// videos). Every image takes the AnyRes path: transformers 5.17's processor, given a chat's images
// as one flat list, counts one image per batch entry (batch_num_images 1 each), so several images
// in a request are each tiled. A video is a list of frame URLs taken as given (fps is accepted and
// checked, and changes nothing: the model has no temporal positions); video files are refused.
#pragma once

#include <string>
#include <vector>

#include "model/media/onevision_preprocess.h"
#include "server/media/media_item_loader.h"

namespace vlm {

struct OnevisionMediaOptions {
  OnevisionPreprocessConfig image;  // image_processor section
  OnevisionPreprocessConfig video;  // video_processor section
  int32_t image_token_id = 151646;
  int32_t video_token_id = 151647;
  int grid = 27;                    // the tower's patches per tile side
  int max_num_patches = 9;          // anyres_max_N
  int max_video_frames = 32;
};

class OnevisionMediaLoader : public MediaItemLoader {
 public:
  OnevisionMediaLoader(MediaFetchOptions fetch, ImageLimits limits, OnevisionMediaOptions options);

  MediaBytes fetch_image_bytes(const std::string& url, const std::string& param) const override;
  // Throws RequestError (400, param `param`) for bytes that are not a supported image, an image
  // over the byte or pixel limits, or a size the preprocessing refuses.
  MediaPixels image_from_bytes(const MediaBytes& bytes, const std::string& param) const override;
  BlockHash image_preprocess_key() const override { return preprocess_key_; }
  MediaPixels load_video(const std::vector<std::string>& frames, double fps, const std::string& param) const override;
  // Video files are not taken yet (LlavaOnevisionVideoProcessor's frame sampling has no oracle
  // here): a 400 asking for the frames.
  MediaPixels load_video_file(const std::string& url, const VideoSamplingParams& sampling,
                              const std::string& param) const override;
  VideoSamplingParams default_sampling() const override { return {}; }
  // image: the AnyRes layout's tokens; video: frames * ceil(g/2)^2 + 1 (the newline), per frame ceil(g/2)^2.
  MediaTokens tokens(const MediaPixels& item) const override;
  int32_t image_token_id() const override { return options_.image_token_id; }
  int32_t video_token_id() const override { return options_.video_token_id; }
  bool accepts_video() const override { return true; }

 private:
  MediaFetchOptions fetch_;
  BlockHash preprocess_key_;
  ImageLimits limits_;
  OnevisionMediaOptions options_;
};

}  // namespace vlm
