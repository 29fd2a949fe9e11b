// Row movement between activations on the GPU (the CUDA RowOps and LearnedRows of
// model/layers/cuda): copies of rows to arbitrary rows, and the bilinear resize of a channels-last
// map (LLaVA-OneVision's pooling and shrink), each tested against its CPU twin
// (tests/kernels/cuda/test_cuda_row_ops.cpp). Same contract as ops_cuda.h: device pointers, work
// enqueued on `s`, launch checked; "dt" arrays F32, BF16 or F16; arithmetic in f32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

// dst[dst_idx[j] * C + i] = src[src_idx[j] * C + i] for j < R, i < C (src_idx null: j), converted
// from src_dt to dst_dt. Distinct dst_idx entries (else which copy lands is unspecified).
void copy_rows(const void* src, DType src_dt, const int32_t* src_idx, void* dst, DType dst_dt, const int32_t* dst_idx,
               int64_t R, int64_t C, cudaStream_t s);

// torch.nn.functional.interpolate(mode="bilinear", align_corners=False) without a scale factor,
// channels-last: in [H, W, C] -> out [oh, ow, C] (both dt), source coordinate
// (d + 0.5) * in / out - 0.5 clamped at 0, every product and sum rounded in f32 in the order of
// the CPU's bilinear_resize (kernels/ops/vision_ops.h; no fused multiply-add), so f32 maps equal
// it. One block per output pixel.
void bilinear_resize(const void* in, DType dt, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, void* out,
                     cudaStream_t s);
// The naive twin: one thread per output element, the same arithmetic (tests).
void bilinear_resize_naive(const void* in, DType dt, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, void* out,
                           cudaStream_t s);

// Qwen3-VL's interpolated positions (the CUDA PositionTable): for each entry e < E, 11 ints at
// entries + 11 e: source rows r0..r3 of table [*, C] f32, their weights w0..w3 (f32 bit patterns),
// a destination row d, a count t and a stride; for f < t,
//   dst[d + f * stride] += ((table[r0] w0 + table[r1] w1) + table[r2] w2) + table[r3] w3,
// each product and sum rounded in f32 in that order (CpuPositionTable's arithmetic, which the test
// compares with bit for bit). dst f32; distinct destination rows across entries and frames.
void add_blended_rows(const float* table, int64_t C, const int32_t* entries, int64_t E, float* dst, cudaStream_t s);

// Qwen3-VL's DeepStack on the GPU (CudaRowOps::add_override_plane): for j < M, i < C,
//   x[rows[j] * C + i] += src[j * stride + i],
// one f32 add per value (so every implementation gives the same bits). x f32 [*, C], src f32 rows
// of `stride` floats (stride >= C: one plane of a media row carrying several); rows [M] distinct.
// One block per row, float4 accesses when C, stride and both pointers allow.
void add_rows_at(const float* src, int64_t stride, const int32_t* rows, int64_t M, int64_t C, float* x, cudaStream_t s);
// The naive twin: one thread per value (tests).
void add_rows_at_naive(const float* src, int64_t stride, const int32_t* rows, int64_t M, int64_t C, float* x,
                       cudaStream_t s);

}  // namespace vlm::cuda
