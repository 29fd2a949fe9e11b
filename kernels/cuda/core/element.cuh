// Device-side element types of the GPU kernels: load/store between f32 and the stored type
// (float, __nv_bfloat16, __half) with round-to-nearest-even, and the dispatch from a DType.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// Calls f(T{}) with T the device type of `dt` (F32, BF16 or F16); InternalError otherwise.
template <typename F>
void dispatch_float(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F16: f(__half{}); return;
    default: unsupported_dtype(dt);
  }
}

}  // namespace vlm::cuda
