#include "model/media/anyres.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/check.h"

namespace vlm {

Resolution select_best_resolution(Resolution image, const std::vector<Resolution>& pinpoints) {
  VLM_CHECK(!pinpoints.empty() && image.height > 0 && image.width > 0, "best resolution of {}x{} among {}",
            image.height, image.width, pinpoints.size());
  Resolution best{};
  int64_t max_effective = 0;
  int64_t min_wasted = std::numeric_limits<int64_t>::max();
  const int64_t area = static_cast<int64_t>(image.width) * image.height;
  for (const Resolution& r : pinpoints) {
    const double scale = std::min(static_cast<double>(r.width) / image.width,
                                  static_cast<double>(r.height) / image.height);
    const auto dw = static_cast<int64_t>(image.width * scale), dh = static_cast<int64_t>(image.height * scale);
    const int64_t effective = std::min(dw * dh, area);
    const int64_t wasted = static_cast<int64_t>(r.width) * r.height - effective;
    if (effective > max_effective || (effective == max_effective && wasted < min_wasted)) {
      max_effective = effective;
      min_wasted = wasted;
      best = r;
    }
  }
  return best;
}

Resolution patch_output_size(Resolution image, Resolution target) {
  const double scale_w = static_cast<double>(target.width) / image.width;
  const double scale_h = static_cast<double>(target.height) / image.height;
  if (scale_w < scale_h)
    return {std::min(static_cast<int>(std::ceil(image.height * scale_w)), target.height), target.width};
  return {target.height, std::min(static_cast<int>(std::ceil(image.width * scale_h)), target.width)};
}

AnyresLayout anyres_layout(Resolution image, const std::vector<Resolution>& pinpoints, int tile, int grid,
                           int max_num_patches) {
  VLM_CHECK(tile > 0 && grid > 0 && max_num_patches > 0, "anyres tile {} grid {} max {}", tile, grid,
            max_num_patches);
  const Resolution best = select_best_resolution(image, pinpoints);
  AnyresLayout a;
  a.grid = grid;
  a.tile_rows = best.height / tile;
  a.tile_cols = best.width / tile;
  const int H = a.tile_rows * grid, W = a.tile_cols * grid;
  a.unpad_h = H, a.unpad_w = W;
  // modeling_llava_onevision.unpad_image: the padding of the image's aspect inside the grid.
  const double original_aspect = static_cast<double>(image.width) / image.height;
  const double current_aspect = static_cast<double>(W) / H;
  auto round7 = [](double x) { return std::round(x * 1e7) / 1e7; };  // Python round(x, 7)
  if (original_aspect > current_aspect) {
    const double scale = static_cast<double>(W) / image.width;
    const int new_h = static_cast<int>(round7(image.height * scale));
    const int pad = (H - new_h) / 2;
    a.unpad_top = pad;
    a.unpad_h = H - 2 * pad;
  } else {
    const double scale = static_cast<double>(H) / image.height;
    const int new_w = static_cast<int>(round7(image.width * scale));
    const int pad = (W - new_w) / 2;
    a.unpad_left = pad;
    a.unpad_w = W - 2 * pad;
  }
  a.out_h = a.unpad_h, a.out_w = a.unpad_w;
  const double ratio = std::sqrt(static_cast<double>(a.unpad_h) * a.unpad_w /
                                 (static_cast<double>(max_num_patches) * grid * grid));
  if (ratio > 1.1) {
    a.out_h = static_cast<int>(std::floor(a.unpad_h / ratio));
    a.out_w = static_cast<int>(std::floor(a.unpad_w / ratio));
  }
  return a;
}

}  // namespace vlm
