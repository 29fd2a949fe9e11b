// The top-k selection of the vertical-slash estimates (kernels/sparse_prefill/top_k.h,
// top_k_indices) on the GPU, for many score segments at once: one radix sort of the whole score
// array (key: segment, then the score descending; stable, so ties go to the smaller index), the
// first k of each segment flagged, then compacted in index order. Plain C++17 (included by the .cu
// and by the estimators' .cpp files).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace vlm::cuda {

// scores[total] (f32, device, >= 0 or +inf) in num_segments contiguous segments: segment s holds
// [begin[s], begin[s + 1]) (begin[num_segments] = total). out[out_begin[s] .. + k[s]) gets the
// indices (relative to begin[s]) of segment s's k[s] largest scores (k[s] <= its length), ties
// to the smaller index, in ascending index order; out_begin must be the exclusive sum of k.
// begin, k, out_begin: device arrays.
struct LineTopK {
  const float* scores = nullptr;
  int64_t total = 0;
  int num_segments = 0;
  const int64_t* begin = nullptr;      // [num_segments + 1]
  const int64_t* k = nullptr;          // [num_segments]
  const int64_t* out_begin = nullptr;  // [num_segments]
  int32_t* out = nullptr;
};

// Scratch of line_top_k for `total` scores and `num_segments` segments (bytes, one allocation).
size_t line_top_k_scratch_bytes(int64_t total, int num_segments);
void line_top_k(const LineTopK& args, void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace vlm::cuda
