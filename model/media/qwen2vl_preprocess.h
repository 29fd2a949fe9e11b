// Qwen2VLImageProcessor / Qwen2VLVideoProcessor (transformers 5.17) on the CPU, from a
// checkpoint's preprocessor_config.json (or video_preprocessor_config.json): smart_resize to a
// multiple of patch_size * merge_size within [min_pixels, max_pixels], bicubic resize (PIL's, as
// image_preprocess.h; 5.17 resizes with torchvision: within 1 level of PIL on the fixtures),
// rescale + normalize (bit-exact with 5.17 after the resize), frames padded to a multiple of
// temporal_patch_size by repeating the last one (an image is one frame), then patchified:
// rows ordered (t, h / m, w / m, m, m), columns (channel, temporal, 14, 14) — the Conv3d weight's
// layout. Video frames are given already sampled (no fps-based sampling here).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/media/image_decode.h"

namespace vlm {

struct Qwen2VLPreprocessConfig {
  int64_t min_pixels = 56 * 56;         // size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  bool do_resize = true;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> mean{0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> std{0.26862954f, 0.26130258f, 0.27577711f};

  int64_t patch_dim() const { return 3LL * temporal_patch_size * patch_size * patch_size; }  // K

  // Reads size.{shortest,longest}_edge, or min_pixels/max_pixels. Throws LoadError naming
  // `source` for a non-bicubic resample or invalid sizes.
  static Qwen2VLPreprocessConfig from_json(const nlohmann::json& j, const std::string& source);
  // DIR/preprocessor_config.json (video: DIR/video_preprocessor_config.json, falling back to the
  // image one), or transformers 5's DIR/processor_config.json "image_processor" / "video_processor"
  // (model/media/processor_config.h). Throws LoadError naming the file.
  static Qwen2VLPreprocessConfig load(const std::string& model_dir, bool video);
};

// transformers smart_resize: {height, width}, each a multiple of `factor`. Rounds half to even
// (Python round). Throws RequestError (400) for a side under 10 pixels or an aspect ratio over 200.
std::pair<int, int> smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels);

// The output size {h, w} of qwen2vl_preprocess for these frames (smart_resize, or the frames' own
// size when resizing is off). Throws RequestError (400) as qwen2vl_preprocess does for no frames,
// frames of different sizes, or a size smart_resize refuses.
std::pair<int, int> qwen2vl_output_size(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg);

// Rescale + normalize of each 8-bit level, per channel: table[c][level], computed with
// normalize_to_chw's float operations (qwen2vl_preprocess writes its rows through it; the GPU
// path uploads it, so both give bit-identical values).
using Qwen2VLNormalizeTable = std::array<std::array<float, 256>, 3>;  // [channel][level]
Qwen2VLNormalizeTable qwen2vl_normalize_table(const Qwen2VLPreprocessConfig& cfg);

// One frame already at the output size {h, w} (qwen2vl_output_size) into slot ft
// (0 <= ft < temporal_patch_size) of one temporal group's rows, group_rows [(h / ps) * (w / ps), K]
// in qwen2vl_preprocess's row order: in every row, columns [(c * tp + ft) * ps * ps, + ps * ps)
// for c = 0, 1, 2 get the frame's patch through `lut` (qwen2vl_normalize_table(cfg)); the other
// slots' columns are not touched. qwen2vl_preprocess writes every frame through this.
void qwen2vl_write_frame_rows(const RgbImage& frame, int ft, const Qwen2VLPreprocessConfig& cfg,
                              const Qwen2VLNormalizeTable& lut, float* group_rows);

struct VisionPatches {
  std::vector<float> pixels;        // [P, K] P = t * h * w
  std::array<int32_t, 3> grid_thw;  // (t, h, w) in patches
};

// Preprocesses one image (one frame) or one video (frames of equal size). Throws RequestError
// (400) for no frames, frames of different sizes, or a size smart_resize refuses.
// Runs over temporal patches on media_thread_pool() (model/media/media_thread_pool.h), each task
// resizing its frames and writing its rows straight from the 8-bit pixels through a per-channel
// table of the 256 normalized levels (no full-size float copy of the frames); the rows' pages are
// made present on the pool first (kernels/core/populated_vector.h).
// A video file's rows can instead be made while it decodes: model/media/qwen2vl_video_rows.h.
VisionPatches qwen2vl_preprocess(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg);
// qwen2vl_preprocess with the output size given: every frame bicubic-resized to out_h x out_w
// (none when already that size; cfg.do_resize is not read), then normalized and patchified as
// qwen2vl_preprocess (which is this with qwen2vl_output_size's size). Qwen3-VL's videos resize
// to their own rule's size (model/media/qwen3vl_video.h) and their Frames8 rows come through here
// (model/media/qwen2vl_frames.h). Throws RequestError (400) for no frames, frames of different
// sizes, or a size that is not a positive multiple of patch_size * merge_size.
// Throws RequestError (400) unless frames is non-empty, its frames share one size and out_h x out_w
// is a positive multiple of patch_size * merge_size: the input contract of qwen2vl_preprocess_to and
// frames8_item (model/media/qwen2vl_frames.h).
void check_frames_and_target(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, int out_h,
                             int out_w);

VisionPatches qwen2vl_preprocess_to(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg, int out_h,
                                    int out_w);
// Reference: one thread, each frame resized and normalized into a [n, 3, h, w] buffer, then
// patchified. qwen2vl_preprocess's output is bit-identical (tests/model/media).
VisionPatches qwen2vl_preprocess_ref(std::span<const RgbImage> frames, const Qwen2VLPreprocessConfig& cfg);

}  // namespace vlm
