// Qwen3VLVideoProcessor (transformers 5.17, video_processing_qwen3_vl.py) and the timestamps
// Qwen3VLProcessor writes before each temporal group of a video (processing_qwen3_vl.py), on the
// CPU. Images go through Qwen2VLImageProcessor unchanged (qwen2vl_preprocess with the
// checkpoint's 16-px settings); videos differ in the resize: the pixel budget [min_pixels,
// max_pixels] bounds the whole clip, t_bar * h * w with t_bar = round(num_frames / tp) * tp (Python
// round), and beta from num_frames * h * w; with cap_pixels_per_frame the budget per frame is
// max(min(max_video_tokens * factor^2, longest_edge // n), int(shortest_edge * 1.05)). The
// resized frames are then rescaled, normalized, padded and patchified as Qwen2-VL's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/media/media_pixels.h"
#include "model/media/qwen2vl_preprocess.h"

namespace vlm {

struct Qwen3VLVideoConfig {
  Qwen2VLPreprocessConfig base;  // size.{shortest,longest}_edge -> min/max_pixels, patch 16, ...
  bool cap_pixels_per_frame = false;  // 5.17's default (None: uncapped)
  int64_t max_video_tokens = 768;
  double fps = 2.0;  // frames sampled per second of a video file
  int min_frames = 4;
  int max_frames = 768;

  // The processor settings' video_processor object (or video_preprocessor_config.json). Throws
  // LoadError naming `source` as Qwen2VLPreprocessConfig::from_json does, or for a non-boolean
  // cap_pixels_per_frame / non-positive max_video_tokens, fps, frame bounds.
  static Qwen3VLVideoConfig from_json(const nlohmann::json& j, const std::string& source);
  // DIR/video_preprocessor_config.json, else processor_config.json's "video_processor", else the
  // image processor's settings.
  static Qwen3VLVideoConfig load(const std::string& model_dir);
};

// Qwen3-VL's video smart_resize: {height, width} of the resized frames, multiples of
// patch_size * merge_size. Throws RequestError (400) for fewer frames than temporal_patch_size
// (transformers raises there too), a side under 10 pixels or an aspect ratio over 200.
std::pair<int, int> qwen3vl_video_size(int num_frames, int height, int width, const Qwen3VLVideoConfig& cfg);

// The frames (sampled already, of one size) -> patch rows [t*h*w, K] and grid (t, h, w), as
// Qwen3VLVideoProcessor with do_sample_frames false.
VisionPatches qwen3vl_preprocess_video(std::span<const RgbImage> frames, const Qwen3VLVideoConfig& cfg);

// The size {height, width} qwen3vl_preprocess_video resizes these frames to (qwen3vl_video_size;
// the frames' own size when do_resize is off). Throws RequestError (400) as
// qwen3vl_preprocess_video does.
std::pair<int, int> qwen3vl_video_target(std::span<const RgbImage> frames, const Qwen3VLVideoConfig& cfg);

// The same video in the Frames8 form (model/media/qwen2vl_frames.h): the frames kept as 8-bit RGB
// with cfg.base and the target qwen3vl_video_target; its rows (qwen2vl_frames_rows, or the GPU's
// CudaFramePreprocessor) are bit-identical to qwen3vl_preprocess_video's. grid_thw, height,
// width and num_frames set; group_seconds and source keys are the caller's. Throws as
// qwen3vl_video_target.
MediaPixels qwen3vl_video_frames8(std::vector<RgbImage> frames, const Qwen3VLVideoConfig& cfg);

// The frames Qwen3VLVideoProcessor.sample_frames picks from a file of `total_frames` at
// `video_fps`, sampling at `fps`: n = int(total / video_fps * fps) clamped to [min_frames,
// max_frames] and to total, indices round_half_even(linspace(0, total - 1, n)). Throws
// RequestError (400) for no frames or a rate that is not positive.
std::vector<int64_t> qwen3vl_sample_indices(int64_t total_frames, double video_fps, double fps, int64_t min_frames,
                                            int64_t max_frames);

// round_half_even(numpy linspace(0, total - 1, n)): n >= 1 frame indices of a video of total.
std::vector<int64_t> qwen3vl_linspace_indices(int64_t total_frames, int64_t n);

// Each temporal group's time in seconds (_calculate_timestamps): the sampled frames' times
// (frame index / the video's fps), padded with the last to a multiple of temporal_patch_size,
// then per group the mean of its first and last frame's time.
std::vector<double> qwen3vl_group_timestamps(std::span<const double> frame_seconds, int temporal_patch_size);

// A video item of grid (t, h, w) -> t items of grid (1, h, w), its temporal groups in order, in
// the video's form: Rows: rows [g*h*w, (g+1)*h*w) each; Frames8: frames [g*tp, min((g+1)*tp, n))
// each (moved out of `video`), with its settings and resize target (so each group's rows are the
// video's rows of that group: the last group pads by repeating its last frame, as the whole
// video does). num_frames the group's given frames, the group's entry of group_seconds when the
// video has them, video_group g, second_per_grid kept; source keys are not (a group's identity
// is the caller's: server/media/qwen3vl_media_loader.h derives it from the video's).
std::vector<MediaPixels> qwen3vl_split_video(MediaPixels video, int temporal_patch_size);

// The text before a group: "<%.1f seconds>" (Python's formatting: round half to even on the
// double's exact value, as printf).
std::string qwen3vl_timestamp_text(double seconds);

}  // namespace vlm
