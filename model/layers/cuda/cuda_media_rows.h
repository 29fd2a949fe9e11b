// The step's media rows into the decoder's input embeddings on the GPU (CudaEmbedding, after the
// token rows): the EmbeddingOverride's host rows (runs of use[], pageable copies) and device runs
// (rows a GPU encoder made), each run in one copy.
#pragma once

#include <cstdint>

#include "model/layers/cuda/cuda_step.h"

namespace vlm {

// s.override's media rows -> x [s.T, C] f32 (device). One plane (most models): each run copied
// into x. DeepStack (num_planes P > 1, Qwen3-VL): each run's rows [n, P C] go once to the step's
// kMediaPlanes scratch, plane 0 from there into x, and s.media_planes / s.media_rows /
// s.num_media_rows name them for RowOps::add_override_plane (plane p after decoder layer p - 1);
// both reset (no media rows) on a step without any. Enqueued on s.stream; InternalError for a run
// outside the step's rows or use[] without embeds.
void upload_media_rows(CudaStep& s, int64_t C, float* x);

}  // namespace vlm
