// One preprocessed media item of a request (an image, or a video as a list of frames) in the
// layout its model's encoder takes, with what the prompt and M-RoPE need to know about it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/decoder/modality.h"

namespace vlm {

struct MediaPixels {
  // LLaVA: pixel_values [3, H, W] (model/image_preprocess). Qwen2-VL family: patch rows [P, K],
  // P = t * h * w of grid_thw, K = 3 * temporal_patch_size * 14 * 14 (model/qwen2vl_preprocess).
  std::vector<float> data;
  int height = 0;  // LLaVA: pixel rows H (Qwen2-VL: the resized frame's pixel rows)
  int width = 0;   // LLaVA: pixel columns W (Qwen2-VL: the resized frame's pixel columns)
  Modality modality = Modality::Image;       // Image or Video
  std::array<int32_t, 3> grid_thw{0, 0, 0};  // Qwen2-VL family: (t, h, w) in patches; zeros: LLaVA
  float second_per_grid = 1.0f;  // video: seconds per temporal grid step (temporal_patch_size / fps)
  int32_t num_frames = 0;        // video: frames given (before padding to temporal_patch_size)
};

}  // namespace vlm
