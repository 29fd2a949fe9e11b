// Qwen3VLMediaLoader: the image and video parts of a chat request -> MediaPixels for Qwen3-VL
// (model/families/qwen3_vl.h).
//
// Images: as Qwen2VLImageProcessor with the checkpoint's 16-px settings (the Qwen2-VL loader's
// image path, server/media/qwen2vl_media_loader.h). Videos: a list of frame URLs taken as given at
// the part's fps (frame i at i / fps seconds), or one video file decoded with FFmpeg
// (model/media/video_decode.h) at the frames Qwen3VLVideoProcessor.sample_frames picks (the
// request's fps or num_frames over the checkpoint's fps, min/max frames, at most
// max_video_frames); resized, normalized and patchified as Qwen3VLVideoProcessor
// (model/media/qwen3vl_video.h). Each video carries its temporal groups' times
// (MediaPixels::group_seconds), and video_groups() hands the prompt its groups, each written as
// the processor writes it: "<t seconds><|vision_start|>" group "<|vision_end|>".
//
// Form: with options.gpu_preprocess (the server sets it when the engine runs on the CUDA backend,
// as for Qwen2-VL), images and videos (frame lists and files) whose frames fit frames8_fit()
// come out in the Frames8 form (8-bit frames, the settings and the resize target; no rows made
// here: CudaQwen3VLVisionRunner makes them on the GPU), and video_groups() splits such a video
// into Frames8 groups of its frames; otherwise, and always on the CPU backend, as patch rows.
// Keys: every item gets a source key (MediaPixels::source_key, engine/scheduling/block_hash.h):
// images as the Qwen2-VL loader's; a video the fetched bytes (a frame list: each frame's) with
// the processor settings and limits, the sampled frame indices and the file's rate (or the
// given fps); each group the video's key and its index. The same in both forms, so prefix-cache
// keys do not depend on the backend's form.
#pragma once

#include <string>
#include <vector>

#include "model/media/qwen3vl_video.h"
#include "model/media/video_decode.h"
#include "server/media/qwen2vl_media_loader.h"

namespace vlm {

struct Qwen3VLMediaOptions {
  Qwen2VLMediaOptions image;  // the image settings and token ids (its video fields unused)
  Qwen3VLVideoConfig video;   // video_processor settings (resize budget, fps, min/max frames)
  int max_video_frames = 32;  // frames of one video (before padding; files: after sampling)
  VideoLimits video_limits;   // video files: bytes, pixels, seconds, frames, decode time
  bool gpu_preprocess = false;  // hand the Frames8 form (the CUDA backend's encoder preprocesses)
};

class Qwen3VLMediaLoader : public MediaItemLoader {
 public:
  Qwen3VLMediaLoader(MediaFetchOptions fetch, ImageLimits limits, Qwen3VLMediaOptions options);

  MediaBytes fetch_image_bytes(const std::string& url, const std::string& param) const override {
    return images_.fetch_image_bytes(url, param);
  }
  MediaPixels image_from_bytes(const MediaBytes& bytes, const std::string& param) const override {
    return images_.image_from_bytes(bytes, param);
  }
  BlockHash image_preprocess_key() const override { return images_.image_preprocess_key(); }
  // Throws RequestError (400, param `param`) as the Qwen2-VL loader, and for fewer frames than
  // temporal_patch_size (the processor refuses them too).
  MediaPixels load_video(const std::vector<std::string>& frames, double fps, const std::string& param) const override;
  MediaPixels load_video_file(const std::string& url, const VideoSamplingParams& sampling,
                              const std::string& param) const override;
  VideoSamplingParams default_sampling() const override;
  MediaTokens tokens(const MediaPixels& item) const override;
  int32_t image_token_id() const override { return options_.image.image_token_id; }
  int32_t video_token_id() const override { return options_.image.video_token_id; }
  bool accepts_video() const override { return true; }
  // A video's temporal groups as items of grid (1, h, w) in the video's form, each after
  // "<t seconds><|vision_start|>" and before "<|vision_end|>"; the video's frames or rows move into
  // them. Each group's source key: the video's with the group's index (none when the video has none).
  std::vector<VideoGroup> video_groups(MediaPixels& video) const override;

 private:
  MediaPixels video_item(std::vector<RgbImage> frames, std::span<const double> seconds, const std::string& param) const;

  MediaFetchOptions fetch_;
  ImageLimits limits_;
  Qwen3VLMediaOptions options_;
  Qwen2VLMediaLoader images_;
  BlockHash video_preprocess_key_;  // video settings, limits, max frames
};

}  // namespace vlm
