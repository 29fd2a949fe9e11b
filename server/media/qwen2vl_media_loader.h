// Qwen2VLMediaLoader: the image and video parts of a chat request -> MediaPixels for the
// Qwen2-VL family (model/families/qwen2_vl.h). Fetches each URL (server/media_fetch: data: URLs,
// http(s) and allowed local files, with its limits), decodes it as an image (model/image_decode,
// byte and pixel limits) and preprocesses it as the checkpoint's preprocessor_config.json /
// video_preprocessor_config.json say (model/qwen2vl_preprocess: smart_resize, normalize,
// patchify).
//
// A video is a list of frame URLs (images of one size), taken as given, as transformers'
// Qwen2VLVideoProcessor does with do_sample_frames false: an odd count is padded to a multiple of
// temporal_patch_size by repeating the last frame (transformers 5.17 `pad = -num_frames %
// temporal_patch_size`, `videos[:, -1:]` repeated). `fps` is the rate of the given frames;
// second_per_grid = temporal_patch_size / fps (Qwen2.5-VL's temporal M-RoPE spacing).
//
// A video file (one URL: MP4/MOV, WebM/MKV, animated GIF) is fetched within the video byte limit,
// decoded with FFmpeg (model/media/video_decode: allow-lists, limits, time limit), sampled as
// transformers' Qwen2VLVideoProcessor.sample_frames does (model/media/video_sampling: fps 2.0 by
// default, min/max frames, counts rounded to temporal_patch_size, at most max_video_frames),
// each frame capped by qwen-vl-utils' total-pixel budget, then preprocessed as frame lists are;
// second_per_grid = temporal_patch_size / the sampled rate (transformers 5.17's
// VideoMetadata.sampled_fps), so Qwen2.5-VL's temporal positions follow the real time.
//
// Form: with options.gpu_preprocess (the server sets it when the engine runs on the CUDA backend,
// whose encoder preprocesses on the GPU), images and videos whose frames fit frames8_fit() come
// out in the Frames8 form (model/media/media_pixels.h: the 8-bit frames, no rows made here);
// otherwise, and always on the CPU backend, in the Rows form (qwen2vl_preprocess; a video file's
// rows on the CPU backend are made while it decodes, model/media/qwen2vl_video_rows.h: the same
// rows, no frame kept).
// Keys: every item gets a source key (MediaPixels::source_key, engine/scheduling/block_hash.h):
// the fetched bytes (a frame list: each frame's) with everything that changes the rows: the
// processor settings and limits (image_preprocess_key()), for video files the per-frame pixel cap,
// the sampled frame indices and rate, for frame lists the given fps. The same in both forms.
#pragma once

#include <string>
#include <vector>

#include "model/media/image_decode.h"
#include "model/media/media_pixels.h"
#include "model/families/multimodal_input.h"
#include "model/media/qwen2vl_preprocess.h"
#include "model/media/video_decode.h"
#include "model/media/video_sampling.h"
#include "server/media/media_fetch.h"
#include "server/media/media_item_loader.h"

namespace vlm {

struct Qwen2VLMediaOptions {
  Qwen2VLPreprocessConfig image;  // preprocessor_config.json
  Qwen2VLPreprocessConfig video;  // video_preprocessor_config.json (else the image one)
  int32_t image_token_id = 151655;
  int32_t video_token_id = 151656;
  bool accepts_video = true;      // the model takes videos
  int max_video_frames = 32;      // frames of one video (before padding; files: after sampling)
  VideoSamplingParams sampling;   // video files: video_preprocessor_config.json's fps, min/max frames
  VideoLimits video_limits;       // video files: bytes, pixels, seconds, frames, decode time
  int64_t video_total_pixels = 90316800;  // qwen-vl-utils VIDEO_TOTAL_PIXELS (128000 * 28 * 28 * 0.9)
  bool gpu_preprocess = false;    // hand the Frames8 form (the CUDA backend's encoder preprocesses)
};

class Qwen2VLMediaLoader : public MediaItemLoader {
 public:
  Qwen2VLMediaLoader(MediaFetchOptions fetch, ImageLimits limits, Qwen2VLMediaOptions options);
  const Qwen2VLMediaOptions& options() const { return options_; }

  MediaBytes fetch_image_bytes(const std::string& url, const std::string& param) const override;
  // Throws RequestError (400, param `param`) for bytes that are not a supported image, an image
  // over the byte or pixel limits, or a size the preprocessing refuses.
  MediaPixels image_from_bytes(const MediaBytes& bytes, const std::string& param) const override;
  BlockHash image_preprocess_key() const override { return preprocess_key_; }
  // frames: one URL per frame. Throws RequestError (400, param `param`) as load_image, and for
  // no frames, more than max_video_frames, frames of different sizes, or fps not in (0, 1000].
  MediaPixels load_video(const std::vector<std::string>& frames, double fps, const std::string& param) const override;
  // One video file. `sampling`: the request's fps or num_frames and min/max frames over the
  // model's defaults (options().sampling); max_frames is further capped at max_video_frames, and a
  // num_frames over it is refused. Throws RequestError (400, param `param`) as load_image, and for
  // a file video_decode or sample_frames refuses (the message says why).
  MediaPixels load_video_file(const std::string& url, const VideoSamplingParams& sampling,
                              const std::string& param) const override;

  // The prompt tokens of an item loaded here (grid t*h*w / merge^2, per frame h*w / merge^2).
  MediaTokens tokens(const MediaPixels& item) const override;
  int32_t image_token_id() const override { return options_.image_token_id; }
  int32_t video_token_id() const override { return options_.video_token_id; }
  bool accepts_video() const override { return options_.accepts_video; }
  VideoSamplingParams default_sampling() const override { return options_.sampling; }

 private:
  MediaFetchOptions fetch_;
  BlockHash preprocess_key_;        // image settings and limits
  BlockHash video_preprocess_key_;  // video settings, limits, max frames, total pixels
  ImageLimits limits_;
  Qwen2VLMediaOptions options_;
};

}  // namespace vlm
