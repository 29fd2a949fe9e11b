// The GPU's vision layers (CudaLayers makes them): attention within segments (one varlen
// launch, or cuDNN for equal segments when the step has it), the 2-D vision rope table, the patch
// embedding of whole images, row movement and learned rows, Qwen3-VL's interpolated position
// table (add_blended_rows: the CPU's f32 arithmetic). Each calls the kernels the
// hand-written GPU towers called, in their order, so the towers over these layers gave their
// bits (checked bit for bit before those were deleted in issue 39 step 5b). Host int arrays (segment bounds,
// orders, positions) reach the device through the step's CudaStepInts (one pinned copy each).
#pragma once

#include <memory>

#include "kernels/core/dtype.h"
#include "model/layers/layer_specs.h"
#include "model/layers/layers.h"

namespace vlm {

std::unique_ptr<SegmentAttention> make_cuda_segment_attention(const SegmentAttentionSpec& spec);
std::unique_ptr<VisionRopeTable> make_cuda_vision_rope_table(const VisionRopeSpec& spec);
std::unique_ptr<RowOps> make_cuda_row_ops();
// *bytes += the uploaded weights' bytes.
std::unique_ptr<LearnedRows> make_cuda_learned_rows(const WeightSource& w, const WeightRef& table, int64_t* bytes);
std::unique_ptr<PositionTable> make_cuda_position_table(const WeightSource& w, const PositionTableSpec& spec,
                                                        int64_t* bytes);
std::unique_ptr<PatchEmbedding> make_cuda_patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec,
                                                          DType dt, int64_t* bytes);

}  // namespace vlm
