// Bidirectional (non-causal) multi-head attention over several independent sequences of equal
// length, for vision encoders: every query of a sequence attends every key of that sequence.
// dense_attention runs one (sequence, head) per task on the global thread pool: QK^T and PV as
// single-threaded OpenBLAS sgemm calls and a max-subtracted softmax per row in between.
// dense_attention_ref: plain loops with double accumulation.
#pragma once

#include <cstdint>

namespace vlm {

// q, k, v, out: [N * L, H * D] f32 (head h in columns [h * D, (h + 1) * D)); sequence n owns rows
// [n * L, (n + 1) * L). scale multiplies q·k (usually 1/sqrt(D)). out must not alias q/k/v.
void dense_attention(const float* q, const float* k, const float* v, int64_t N, int64_t L, int H,
                     int D, float scale, float* out);
void dense_attention_ref(const float* q, const float* k, const float* v, int64_t N, int64_t L, int H,
                         int D, float scale, float* out);

}  // namespace vlm
