// Per-head figures of the offline pattern search on the GPU (vlm-search-patterns --device cuda,
// model/decoder/cuda/cuda_pattern_search.h), reduced on the device so only H numbers per
// candidate come back:
//  - head_error_sums: per query head, sum over rows and elements of (out - ref)^2 and of ref^2
//    (double, added into sums[h * 2 + 0] and sums[h * 2 + 1]: the caller zeroes them);
//  - plan_head_blocks: per head of sequence `seq` of a flattened plan view (CudaBlockSparsePlan
//    or CudaGridPlan), its computed key blocks, gathered columns counted in 64-column units
//    (plan_block_counts' per-head figure), written to counts[h].
// Naive references: the host loops of tests/kernels/cuda/test_cuda_head_error.cpp. Plain C++17.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/core/dtype.h"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda {

// out[T, H, D], ref[T, H, D] (device, dtype act: F32, BF16 or F16); sums[H, 2] (device).
void head_error_sums(const void* out /*[T,H,D]*/, const void* ref /*[T,H,D]*/, DType act, int64_t T, int H, int D,
                     double* sums /*[H,2]*/, cudaStream_t stream);

// plan: a view whose descs hold num_seqs * H heads (block_ptr / col_ptr CSR over the head's
// ceil(q_len / 64) query blocks); counts[H] (device).
void plan_head_blocks(const SparsePlanView& plan, int seq, int H, double* counts /*[H]*/, cudaStream_t stream);

}  // namespace vlm::cuda
