// M-RoPE positions (Qwen2-VL, Qwen2.5-VL): three position ids (temporal, height, width) per prompt
// token, equal to transformers 5.17 `Qwen2VLModel.get_rope_index` / `Qwen2_5_VLModel.get_rope_index`.
//
// The prompt splits into runs of equal token type (text, image pad, video pad; a run of pad tokens
// is one media item, consumed in order from its grid list). With `next` = 0 at the start:
//  - a text run of n tokens gets next, next + 1, ... on all three axes; next += n;
//  - a media run with grid (t, h, w) (patches; merged grid t, h / m, w / m) gets, row-major over
//    (t, h', w'): temporal = next + t' * time_interval, height = next + h', width = next + w';
//    then next += max(h / m, w / m)  (5.17 does not advance by the temporal extent).
// time_interval: 1 for images and Qwen2-VL videos; Qwen2.5-VL videos use
// tokens_per_second * int(second_per_grid_t) (5.17 truncates second_per_grid_t to an integer).
// rope_delta = max(all positions) + 1 - prompt length: decode token at cache position p uses p +
// rope_delta on all three axes (what generate() does).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace vlm {

struct MropePositions {
  std::vector<int32_t> positions;  // [L, 3] (t, h, w) per token
  int32_t rope_delta = 0;

  // The [T, 3] positions of decode tokens at cache positions [start, start + n).
  std::vector<int32_t> decode(int32_t start, int32_t n) const;
};

struct MropeInput {
  int32_t image_token_id = 0;
  int32_t video_token_id = 0;
  int spatial_merge_size = 2;
  std::span<const std::array<int32_t, 3>> image_grids;  // [N] (t, h, w) in patches, prompt order
  std::span<const std::array<int32_t, 3>> video_grids;  // [M]
  std::span<const int32_t> video_time_intervals;        // [M], or empty: 1 for every video
};

// Throws RequestError (400) when the prompt holds more media runs than grids, a run's length is
// not t * h * w / merge^2 of its grid, or grids are left over.
MropePositions compute_mrope_positions(std::span<const int32_t> ids, const MropeInput& in);

// Qwen2.5-VL's temporal spacing of one video: tokens_per_second * int(second_per_grid_t).
int32_t qwen25_video_time_interval(double tokens_per_second, float second_per_grid_t);

}  // namespace vlm
