// The estimate every dynamic pattern starts from (ALGORITHMS.md §3.2 step 2): softmax attention
// probabilities of a few query rows (the last queries of a chunk, or of one modality's rows)
// over the keys they may see, in f32 with the causal mask by original positions.
#pragma once

#include <cstdint>

namespace vlm {

// q_rows[R, D] (f32, post-RoPE), q_pos[R] their original positions (each < num_keys);
// keys[num_keys, D]. probs[R, num_keys]: row r holds softmax_j(scale * q_r . k_j) over
// j <= q_pos[r], zero after. One OpenBLAS sgemm for the scores (single-threaded; callers run one
// head per thread-pool task).
void last_q_attention(const float* q_rows /*[R,D]*/, const int32_t* q_pos /*[R]*/, int R,
                      const float* keys /*[N,D]*/, int num_keys, int D, float scale,
                      float* probs /*[R,N]*/);

}  // namespace vlm
