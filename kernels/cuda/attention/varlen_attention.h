// Bidirectional attention over packed variable-length segments on the GPU (the vision towers:
// one segment per image, video frame or Qwen2.5-VL window; all segments of a step in one launch).
// Segment s owns rows [cu_seqlens[s], cu_seqlens[s+1]) of q, k and v, and each of its query rows
// attends every key of the segment (no mask across it, none within it). One head h of row t is
// q[t * row_stride + h * D .. + D) (likewise k, v): the q, k and v parts of a fused projection
// [T, 3, H, D] are read in place (row_stride 3 H D). out [T, H, D] contiguous. All pointers are
// device pointers (cu_seqlens [num_seqs + 1]); work is enqueued on `stream`, nothing allocates.
//
// Kernel choice (no flags): BF16/F16 with D % 8 == 0 and D <= 128 run on tensor cores
// (mma.sync m16n8k16, FlashAttention-2 style, the tiles of kernels/cuda/attention/mma_tile.cuh:
// a 128-row query tile per CTA, 64-key K/V tiles through shared memory, online softmax), head
// dims padded with zeros to 64, 96 or 128 in shared memory (Qwen2-VL's 80 -> 96); everything else, F32
// included (the exact path), runs the reference kernel varlen_attention_naive (one block per
// query row and head, the segment's scores in shared memory, f32 throughout).
#pragma once

#include <cstdint>

#include "kernels/core/dtype.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// max_len: host, the longest segment (sizes the grid). Segments up to kMaxNaiveLen rows on the
// reference path; any length on tensor cores.
constexpr int kMaxNaiveLen = 40960;

void varlen_attention(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int num_heads,
                      int head_dim, const int32_t* cu_seqlens, int num_seqs, int max_len, float scale, void* out,
                      cudaStream_t stream);
void varlen_attention_naive(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int num_heads,
                            int head_dim, const int32_t* cu_seqlens, int num_seqs, int max_len, float scale,
                            void* out, cudaStream_t stream);

}  // namespace vlm::cuda
