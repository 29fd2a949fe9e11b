// Device helpers shared by the attention kernels: element loads/stores of F32/BF16/F16 as f32,
// launch checking, run-time dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/check.h"
#include "kernels/core/dtype.h"

namespace vlm::cuda {

#define VLM_CUDA_CHECK(expr)                                                     \
  do {                                                                           \
    cudaError_t err_ = (expr);                                                   \
    VLM_CHECK(err_ == cudaSuccess, "CUDA: {} ({})", cudaGetErrorString(err_), #expr); \
  } while (0)
#define VLM_CUDA_CHECK_LAUNCH() VLM_CUDA_CHECK(cudaGetLastError())

// dtype tags as template parameters.
template <DType T> struct Elem;  // Elem<DType::BF16>::type = __nv_bfloat16 ...
template <> struct Elem<DType::F32> { using type = float; };
template <> struct Elem<DType::BF16> { using type = __nv_bfloat16; };
template <> struct Elem<DType::F16> { using type = __half; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// PagedKVLayer as device code reads it (its stride helpers are host functions).
struct KVView {
  void* k;
  void* v;
  int64_t block_stride;  // elements per block: Hkv * B * D
  int64_t head_stride;   // elements per head of a block: B * D
  int block_size, num_kv_heads, head_dim;
  // Element offset of row `off` of head h in block `block`.
  __device__ __forceinline__ int64_t offset(int64_t block, int h, int off) const {
    return block * block_stride + h * head_stride + int64_t(off) * head_dim;
  }
};
inline KVView kv_view(const PagedKVLayer& kv) {
  return {kv.k, kv.v, kv.block_stride(), kv.head_stride(), kv.block_size, kv.num_kv_heads, kv.head_dim};
}

template <class Tag> using ElemOf = typename Elem<Tag::value>::type;  // ElemOf<decltype(tag)>

// Run-time dtype load/store, for naive code.
__device__ __forceinline__ float load_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_f32(void* p, DType t, int64_t i, float x) {
  switch (t) {
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); break;
    case DType::F16: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
    default: static_cast<float*>(p)[i] = x;
  }
}

// Calls fn(std::integral_constant<DType, t>{}) for the run-time dtype t (F32, BF16 or F16); the
// callee reads it back as a constant with decltype(tag)::value.
template <class Fn>
void dispatch_float_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: fn(std::integral_constant<DType, DType::F32>{}); break;
    case DType::BF16: fn(std::integral_constant<DType, DType::BF16>{}); break;
    case DType::F16: fn(std::integral_constant<DType, DType::F16>{}); break;
    default: VLM_CHECK(false, "attention: dtype {} is not F32/BF16/F16", dtype_name(t));
  }
}

}  // namespace vlm::cuda
