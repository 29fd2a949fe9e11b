// OnevisionWiring: LLaVA-OneVision's media rows (transformers 5.17 modeling_llava_onevision:
// pack_image_features, apply_pooling) written once over the layer vocabulary, after LLaVA's tower
// and projector (LlavaVision) have made each tile's g x g rows:
//   image: the base tile's rows, then the AnyRes tiles' rows as one (rows*g) x (cols*g) map cut
//          to the unpadded window (model/media/anyres.h), shrunk bilinearly past anyres_max_N,
//          image_newline after each of its rows;
//   video: each frame's g x g rows pooled bilinearly to ceil(g/2)^2, frame after frame, one
//          image_newline after the last.
// The index lists are made on the host from the layout (no data-dependent work on the device).
#pragma once

#include <memory>

#include "model/arch/llava_wiring.h"
#include "model/media/anyres.h"

namespace vlm {

class OnevisionWiring {
 public:
  // vision: LLaVA's tower and projector made by `backend`; newline: the image_newline tensor [C].
  OnevisionWiring(const LlavaVision& vision, LayerBackend& backend, const WeightSource& w, const WeightRef& newline);
  ~OnevisionWiring();

  // The activations of an item of N tiles (image: `layout` non-null) or N frames (video).
  ActivationPlan plan(int64_t N, const AnyresLayout* layout) const;
  // tiles [N, 3*S*S] (base first, then the AnyRes tiles row-major) -> out [layout.num_tokens(), C].
  void image(Step& s, Act tiles, const AnyresLayout& layout, Act out) const;
  // frames [F, 3*S*S] -> out [F * ceil(g/2)^2 + 1, C].
  void video(Step& s, Act frames, Act out) const;

 private:
  int64_t grid() const { return vision_.spec().vision.grid(); }
  const LlavaVision& vision_;
  int first_;  // plan index of the tiles' rows: after the vision's buffers (as many for every N)
  std::unique_ptr<RowOps> rows_;
  std::unique_ptr<LearnedRows> newline_;
};

}  // namespace vlm
