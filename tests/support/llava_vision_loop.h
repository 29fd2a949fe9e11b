// The CLIP / SigLIP encoder's encode and the LLaVA projector's forward as loops over the kernels,
// as they were before the tower and the projector were written over layers
// (model/arch/clip_vision_tower.h, model/arch/llava_wiring.h): kept so tests show the layered
// path gives the same rows bit for bit (issue 39, docs/WRITTEN_ONCE.md step 5a).
#pragma once

#include <span>

#include "model/families/llava.h"
#include "model/vision/clip_vision.h"
#include "model/vision/projector.h"

namespace vlm::testing {

// pixels[N, 3, S, S] -> out[N, L - drop_cls, Cv * layers.size()] (ClipVisionEncoder::encode).
void clip_vision_loop(const ClipVisionEncoder& e, const float* pixels, int64_t N, std::span<const int> layers,
                      bool drop_cls, float* out);
// x[M, Fin] -> y[M, C] (LlavaProjector::forward).
void llava_projector_loop(const LlavaProjector& p, const float* x, int64_t M, float* y);
// pixels[N, 3, S, S] -> image embeddings [N, tokens_per_image, C] (LlavaModel::encode_images).
void llava_encode_images_loop(const LlavaModel& m, const float* pixels, int64_t N, float* out);

}  // namespace vlm::testing
