// Device pieces of the FP8 decode GEMV (fp8_gemv.cu): E4M3 bytes widened to
// f32 exactly (E4M3 -> f16 -> f32) and the 16-element dot over one 16-byte weight vector, k in order.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda::gemv_detail {

// Two E4M3 values (the low and high byte of v) as f32, exactly.
__device__ __forceinline__ float2 fp8x2_f32(uint32_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

__device__ __forceinline__ float fp8_f32(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// acc += fp8(w) . x over 16 elements (k in order): w one 16-byte vector, x two.
template <class T>
__device__ __forceinline__ float dot16(const uint4& w, const uint4& x0, const uint4& x1, float acc) {
  const uint32_t wv[4] = {w.x, w.y, w.z, w.w}, xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = fp8x2_f32(wv[i]), b = fp8x2_f32(wv[i] >> 16);
    const float2 xa = pair_f32(xv[2 * i], T{}), xb = pair_f32(xv[2 * i + 1], T{});
    acc = fmaf(a.x, xa.x, acc);
    acc = fmaf(a.y, xa.y, acc);
    acc = fmaf(b.x, xb.x, acc);
    acc = fmaf(b.y, xb.y, acc);
  }
  return acc;
}

}  // namespace vlm::cuda::gemv_detail
