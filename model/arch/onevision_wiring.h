// OnevisionWiring: LLaVA-OneVision's media rows (transformers 5.17 modeling_llava_onevision:
// pack_image_features, apply_pooling) written once over the layer vocabulary, after LLaVA's tower
// and projector (LlavaVision) have made each tile's g x g rows:
//   image: the base tile's rows, then the AnyRes tiles' rows as one (rows*g) x (cols*g) map cut
//          to the unpadded window (model/media/anyres.h), shrunk bilinearly past anyres_max_N,
//          image_newline after each of its rows;
//   video: each frame's g x g rows pooled bilinearly to ceil(g/2)^2, frame after frame, one
//          image_newline after the last.
// The index lists are made on the host from the layout (no data-dependent work on the device),
// all before the tower runs and alive until the rows are written (a backend may key its copies of
// them by address: CudaStepInts). An image and a video plan as many buffers, so that one
// reservation (largest_plan) serves both.
#pragma once

#include <memory>
#include <vector>

#include "model/arch/llava_wiring.h"
#include "model/media/anyres.h"

namespace vlm {

// What the wiring and a runner's sizes need beyond LLaVA's tower and projector: the AnyRes
// settings (image_grid_pinpoints, vision_aspect_ratio anyres_max_N).
struct OnevisionSpec {
  LlavaVisionSpec llava;
  std::vector<Resolution> grid_pinpoints;  // (height, width) pairs, multiples of the tile size
  int max_num_patches = 9;

  int64_t tile_size() const { return llava.vision.image_size; }  // S
  int64_t grid() const { return llava.vision.grid(); }            // g: features per tile side
  // The AnyRes layout of an image of the given original size.
  AnyresLayout layout(Resolution image) const {
    return anyres_layout(image, grid_pinpoints, static_cast<int>(tile_size()), static_cast<int>(grid()),
                         max_num_patches);
  }
};

class OnevisionWiring {
 public:
  // vision: LLaVA's tower and projector made by `backend`; newline: the image_newline tensor [C].
  OnevisionWiring(const LlavaVision& vision, LayerBackend& backend, const WeightSource& w, const WeightRef& newline);
  ~OnevisionWiring();

  // The activations of an item of N tiles (image: `layout` non-null) or N frames (video).
  ActivationPlan plan(int64_t N, const AnyresLayout* layout) const;
  // Every buffer at its largest over N tiles or frames (of one item or several): a reservation.
  ActivationPlan largest_plan(int64_t N) const;
  // tiles [N, 3*S*S] (base first, then the AnyRes tiles row-major) -> out [layout.num_tokens(), C].
  void image(Step& s, Act tiles, const AnyresLayout& layout, Act out) const;
  // frames [F, 3*S*S] -> out [F * ceil(g/2)^2 + 1, C] (each frame pooled in the Hidden dtype,
  // as HF pools the projector's output in the model's dtype, then copied into out).
  void video(Step& s, Act frames, Act out) const;

 private:
  int64_t grid() const { return vision_.spec().vision.grid(); }
  const LlavaVision& vision_;
  int first_;  // plan index of the tiles' rows: after the vision's buffers (as many for every N)
  std::unique_ptr<RowOps> rows_;
  std::unique_ptr<LearnedRows> newline_;
};

}  // namespace vlm
