// The Qwen2-VL tower's encode as one loop over the kernels, as it was before the tower was
// written over layers (model/arch/qwen2_vision_tower.h): kept so a test shows the layered tower
// gives the same rows bit for bit (issue 39, docs/WRITTEN_ONCE.md step 5a).
#pragma once

#include <array>
#include <span>

#include "model/vision/qwen2_vision.h"

namespace vlm::testing {

void qwen2_vision_loop(const Qwen2VisionEncoder& e, const float* pixels, std::span<const std::array<int32_t, 3>> grids,
                       float* out);

}  // namespace vlm::testing
