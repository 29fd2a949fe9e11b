// LLaVA-NeXT / LLaVA-OneVision "AnyRes" geometry, shared by the image preprocessing (which tiles
// an image) and the model (which counts, unpads and pools the tiles' features). Facts follow
// transformers 5.17 (image_processing_utils.select_best_resolution / get_patch_output_size,
// modeling_llava_onevision.unpad_image / pack_image_features, processing_llava_onevision).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace vlm {

struct Resolution {
  int height = 0;
  int width = 0;
  bool operator==(const Resolution&) const = default;
};

// The grid pinpoint that keeps most of the image's pixels after an aspect-preserving downscale
// into it, ties broken by the least wasted area; the first such pinpoint wins.
// Precondition: pinpoints non-empty, image sides > 0.
Resolution select_best_resolution(Resolution image, const std::vector<Resolution>& pinpoints);

// The aspect-preserving resize of `image` into `target` (one side equals target's, the other
// ceil'ed and capped), before the centered zero padding to `target`.
Resolution patch_output_size(Resolution image, Resolution target);

// One AnyRes image's feature layout: a base tile of g x g features, then the tiles' feature grid
// (rows * g) x (cols * g) cut to the image's aspect (unpad) and, when it holds more than
// max_num_patches * g * g features by a factor over 1.1^2, bilinearly shrunk; each of its rows ends
// with an image_newline token.
struct AnyresLayout {
  int tile_rows = 0, tile_cols = 0;  // tiles of the best resolution
  int grid = 0;                      // g: features per tile side
  int unpad_top = 0, unpad_left = 0; // first kept row / column of the (rows*g) x (cols*g) grid
  int unpad_h = 0, unpad_w = 0;      // kept rows / columns
  int out_h = 0, out_w = 0;          // after the optional bilinear shrink (== unpad_* without it)

  bool shrinks() const { return out_h != unpad_h || out_w != unpad_w; }
  int64_t num_tiles() const { return 1 + static_cast<int64_t>(tile_rows) * tile_cols; }  // base included
  int64_t num_tokens() const {
    return static_cast<int64_t>(grid) * grid + static_cast<int64_t>(out_h) * (out_w + 1);
  }
};

// tile: the vision tower's image size; grid: its patches per side.
AnyresLayout anyres_layout(Resolution image, const std::vector<Resolution>& pinpoints, int tile, int grid,
                           int max_num_patches);

// Tokens of a video frame after LLaVA-OneVision's 2x2 bilinear pooling: ceil(g / 2)^2.
inline int64_t pooled_frame_tokens(int grid) {
  const int64_t p = (grid + 1) / 2;
  return p * p;
}

}  // namespace vlm
