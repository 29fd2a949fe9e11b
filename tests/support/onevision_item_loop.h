// LLaVA-OneVision's encode_item as one loop over host copies and kernels, as it was before the
// wiring was written over layers (model/arch/onevision_wiring.h): kept so a test shows the wiring
// gives the same rows bit for bit (issue 39, docs/WRITTEN_ONCE.md step 7).
#pragma once

#include "model/families/llava_onevision.h"

namespace vlm::testing {

void onevision_item_loop(const LlavaOnevisionModel& m, const MediaPixels& item, float* out);

}  // namespace vlm::testing
