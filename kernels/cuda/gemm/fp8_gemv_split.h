// The split-K form of the FP8 decode GEMV (opt-in: VLM_FP8_GEMV_SPLIT, read by
// model/layers/cuda/cuda_fp8_linear.cpp): fp8_gemv's product and contract (fp8_gemv.h: y[M, N] =
// (x[M, K] . fp8(wq[N, K])^T) * w_scale[N] (+ bias[N]) (+ y), M <= kGemvMaxRows, K % 16 == 0, x
// BF16 or F16, y x's type or F32) with `split` (2 or 4) warps per output column instead of one: a
// block of 8 warps serves 8 / split columns, the column's warp p streams the 16-byte weight vectors
// of the 32-vector chunks p, p + split, p + 2 split, ... (4 loads a lane in flight), each warp sums
// its part over its lanes, and the column's first warp adds the parts in order (shared memory),
// scales and stores as fp8_gemv does. Why: the simple form gives each short product (q/k/v, o_proj:
// N 3,584..4,608) one warp a column, 27-35 warps an SM on the H200, and the long-K down_proj (K
// 18,944) 37 dependent loads a lane; split multiplies the warps, the loads in flight and the SMs'
// occupancy by `split` and divides each warp's chain. Numerics: the same products in f32, summed in
// another order than fp8_gemv's (partial sums per part): not bitwise fp8_gemv's, within f32 rounding
// of it; fp8_gemv_naive is the reference the tests compare with.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

// True for split 2 or 4 over the shapes fp8_gemv takes.
bool fp8_gemv_split_supported(int64_t M, int64_t K, DType dt, int split);

void fp8_gemv_split(const void* x /*[M,K]*/, const uint8_t* wq /*[N,K]*/, const float* w_scale /*[N]*/, DType dt,
                    const void* bias /*[N] or null*/, void* y /*[M,N]*/, DType out_dt, bool accumulate, int64_t M,
                    int64_t N, int64_t K, int split, cudaStream_t s);

}  // namespace vlm::cuda
