// Restated from transformers 5.17 modeling_qwen2_vl.py / modeling_qwen2_5_vl.py (get_rope_index,
// get_vision_position_ids); no code taken. See the header for the rules.
#include "model/decoder/mrope_positions.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

std::vector<int32_t> MropePositions::decode(int32_t start, int32_t n) const {
  std::vector<int32_t> out(static_cast<size_t>(n) * 3);
  for (int32_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) out[static_cast<size_t>(i) * 3 + a] = start + i + rope_delta;
  return out;
}

int32_t qwen25_video_time_interval(double tokens_per_second, float second_per_grid_t) {
  return static_cast<int32_t>(tokens_per_second) * static_cast<int32_t>(std::trunc(second_per_grid_t));
}

MropePositions compute_mrope_positions(std::span<const int32_t> ids, const MropeInput& in) {
  auto bad = [](const std::string& msg) { return RequestError(400, "invalid_request_error", msg); };
  const int32_t L = static_cast<int32_t>(ids.size());
  const int m = in.spatial_merge_size;
  MropePositions r;
  r.positions.resize(static_cast<size_t>(L) * 3);
  auto type_of = [&](int32_t id) { return id == in.image_token_id ? 1 : id == in.video_token_id ? 2 : 0; };
  size_t next_image = 0, next_video = 0;
  int32_t next = 0, max_pos = -1;
  for (int32_t s = 0; s < L;) {
    const int type = type_of(ids[s]);
    int32_t e = s + 1;
    while (e < L && type_of(ids[e]) == type) ++e;
    if (type == 0) {
      for (int32_t i = s; i < e; ++i)
        for (int a = 0; a < 3; ++a) r.positions[static_cast<size_t>(i) * 3 + a] = next + (i - s);
      next += e - s;
      max_pos = std::max(max_pos, next - 1);
    } else {
      const bool image = type == 1;
      auto grids = image ? in.image_grids : in.video_grids;
      size_t& k = image ? next_image : next_video;
      if (k >= grids.size())
        throw bad(fmt::format("the prompt has more {} runs than the {} {} given", image ? "image" : "video",
                              grids.size(), image ? "images" : "videos"));
      const auto [gt, gh, gw] = grids[k];
      const int32_t lh = gh / m, lw = gw / m;
      if (static_cast<int64_t>(gt) * lh * lw != e - s)
        throw bad(fmt::format("{} {} has {} placeholder tokens, its grid {}x{}x{} needs {}", image ? "image" : "video",
                              k, e - s, gt, gh, gw, static_cast<int64_t>(gt) * lh * lw));
      const int32_t interval =
          image || in.video_time_intervals.empty() ? 1 : in.video_time_intervals[k];
      int32_t i = s;
      for (int32_t t = 0; t < gt; ++t)
        for (int32_t y = 0; y < lh; ++y)
          for (int32_t x = 0; x < lw; ++x, ++i) {
            int32_t* p = r.positions.data() + static_cast<size_t>(i) * 3;
            p[0] = next + t * interval;
            p[1] = next + y;
            p[2] = next + x;
            max_pos = std::max({max_pos, p[0], p[1], p[2]});
          }
      ++k;
      next += std::max(lh, lw);
    }
    s = e;
  }
  if (next_image != in.image_grids.size() || next_video != in.video_grids.size())
    throw bad(fmt::format("{} images and {} videos given, the prompt holds {} and {}", in.image_grids.size(),
                          in.video_grids.size(), next_image, next_video));
  r.rope_delta = max_pos + 1 - L;
  return r;
}

}  // namespace vlm
