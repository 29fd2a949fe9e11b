// Frame sampling of a decoded video file for the Qwen2-VL family, as transformers 5.17's
// Qwen2VLVideoProcessor.sample_frames does (the model's video processor; the same defaults as
// qwen-vl-utils' smart_nframes: fps 2.0, min_frames 4, max_frames 768, counts rounded to the
// temporal patch, 2):
//   num_frames given: n = round_half_even(num_frames / tp) * tp
//   else (fps):       n = total / video_fps * fps, clamped to [min_frames, floor(min(max_frames,
//                     total) / tp) * tp] and to total, then floored to a multiple of tp
//   n > total, or n < 1: refused (transformers raises ValueError; qwen-vl-utils too)
//   indices[i] = int(float32(i * (total / n)))   (torch.arange(0, total, total / n).int())
// Timestamps are index / video_fps (transformers' VideoMetadata.timestamps) and the sampled rate
// is n / total * video_fps (VideoMetadata.sampled_fps), from which Qwen2.5-VL's processor takes
// second_per_grid_ts = tp / sampled_fps (transformers 5.17 Qwen2_5_VLProcessor._process_videos).
//
// The per-frame pixel cap from a total budget is qwen-vl-utils' fetch_video rule:
//   max_pixels = max(min(max_pixels, total_pixels / n * tp), int(min_pixels * 1.05)).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vlm {

// What the request (or the model's video_preprocessor_config.json) asks for. fps and num_frames
// are exclusive; with neither, fps = 2.0.
struct VideoSamplingParams {
  std::optional<double> fps;
  std::optional<int64_t> num_frames;
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  int temporal_patch_size = 2;

  // The defaults of a checkpoint: fps, num_frames, min_frames, max_frames and
  // temporal_patch_size of a video_preprocessor_config.json (absent keys keep the defaults).
  // Throws LoadError naming `source` for non-positive values.
  static VideoSamplingParams from_json(const nlohmann::json& j, const std::string& source);
  // DIR/video_preprocessor_config.json when it exists, else the defaults. Throws LoadError
  // naming the file.
  static VideoSamplingParams load(const std::string& model_dir);
};

struct FrameSample {
  std::vector<int64_t> indices;   // [n] increasing frame indices into the video
  std::vector<double> timestamps; // [n] seconds: index / video_fps
  double sampled_fps = 0;         // n / total * video_fps
};

// Throws RequestError (400) when the video cannot be sampled as asked (no frames, a rate that
// is not positive, fps and num_frames both set, or n outside [1, total]); the message says why.
FrameSample sample_frames(int64_t total_frames, double video_fps, const VideoSamplingParams& p);

// qwen-vl-utils' per-frame cap for `num_frames` frames within `total_pixels` (see above).
int64_t video_frame_max_pixels(int64_t min_pixels, int64_t max_pixels, int64_t total_pixels, int64_t num_frames,
                               int temporal_patch_size);

}  // namespace vlm
