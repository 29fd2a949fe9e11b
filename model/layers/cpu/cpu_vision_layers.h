// The CPU's vision layers (CpuLayers makes them): attention within segments, the 2-D vision rope
// table, the patch embedding of whole images, row movement, and the interpolated position table
// (cpu_position_table.cpp). Exact f32, the kernels the pre-layer towers called, in their order.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/layer_specs.h"
#include "model/layers/layers.h"

namespace vlm {

std::unique_ptr<SegmentAttention> make_cpu_segment_attention(const SegmentAttentionSpec& spec);
std::unique_ptr<VisionRopeTable> make_cpu_vision_rope_table(const VisionRopeSpec& spec);
std::unique_ptr<RowOps> make_cpu_row_ops();
std::unique_ptr<PositionTable> make_cpu_position_table(const WeightSource& w, const PositionTableSpec& spec);
// torch.linspace(0, end, n) in f32 as torch's CPU kernel forms it: the sample points of the
// PositionTable (the GPU's computes its blends on the host from them too).
std::vector<float> linspace_f32(float end, int64_t n);
std::unique_ptr<LearnedRows> make_cpu_learned_rows(const WeightSource& w, const WeightRef& table);
std::unique_ptr<PatchEmbedding> make_cpu_patch_embedding(const WeightSource& w, const PatchEmbeddingSpec& spec);

}  // namespace vlm
