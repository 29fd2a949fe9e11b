// Device helpers shared by the attention kernels: the paged cache as device code reads it, and
// run-time-dtype element loads/stores for the naive references (element types, dispatch and error
// checks: kernels/cuda/core).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {

// PagedKVLayer as device code reads it (its stride helpers are host functions).
struct KVView {
  void* k;
  void* v;
  int64_t block_stride;  // elements per block: Hkv * B * D
  int64_t head_stride;   // elements per head of a block: B * D
  int block_size, num_kv_heads, head_dim;
  int block_shift;  // log2(block_size) when it is a power of two, else -1
  const float* k_scale;  // [Hkv]: F8_E4M3 caches only (PagedKVLayer::k_scale), else null
  const float* v_scale;
  // Element offset of row `off` of head h in block `block`.
  __device__ __forceinline__ int64_t offset(int64_t block, int h, int off) const {
    return block * block_stride + h * head_stride + int64_t(off) * head_dim;
  }
  // Element offset of a sequence's token `pos` of head h, through its block table (power-of-two
  // block sizes only: shifts, not divisions, in the tile loaders).
  __device__ __forceinline__ int64_t token_offset(const int32_t* table, int h, int pos) const {
    return offset(table[pos >> block_shift], h, pos & (block_size - 1));
  }
};
inline KVView kv_view(const PagedKVLayer& kv) {
  int shift = -1;
  for (int b = 0; b < 31; ++b)
    if (kv.block_size == (1 << b)) shift = b;
  return {kv.k,           kv.v,          kv.block_stride(), kv.head_stride(), kv.block_size, kv.num_kv_heads,
          kv.head_dim,    shift,         kv.k_scale,        kv.v_scale};
}

// FP8 E4M3 cache elements (paged_kv.h's convention): the stored byte of x under a head's scale
// (x * (1 / scale), rounded to nearest even, saturated to +-448: kernels/core/fp8.h's
// f32_to_fp8_e4m3 of the same product), and the value a byte holds before its scale (exact).
__device__ __forceinline__ uint8_t fp8_kv_store(float x, float inv_scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x * inv_scale, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float fp8_kv_load(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// Run-time dtype load/store, for naive code (F8_E4M3: the byte's value before its scale).
__device__ __forceinline__ float load_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F8_E4M3: return fp8_kv_load(static_cast<const uint8_t*>(p)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
// Element i of the cache's K (value: V) of KV head h as the value it represents: load_f32, times
// the head's scale for an F8_E4M3 cache. For naive code.
__device__ __forceinline__ float load_kv_f32(const KVView& kv, DType t, bool value, int h, int64_t i) {
  const float x = load_f32(value ? kv.v : kv.k, t, i);
  return t == DType::F8_E4M3 ? x * (value ? kv.v_scale : kv.k_scale)[h] : x;
}
__device__ __forceinline__ void store_f32(void* p, DType t, int64_t i, float x) {
  switch (t) {
    case DType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); break;
    case DType::F16: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
    default: static_cast<float*>(p)[i] = x;
  }
}

// SinkRouter's group skip (CudaAttentionBatch::group_skip): true when sequence s's kv group g is a
// sink group. Then the caller's threads [tid, nthreads) write the surrogate (or zeros) to the
// rows [h_begin, h_end) of out [S, H, D] (decode layout) and the kernel returns without reading K/V.
template <class TQ>
__device__ __forceinline__ bool sink_group_skipped(const uint8_t* skip, const float* surrogate, int s, int g,
                                                   int Hkv, int D, int H, int h_begin, int h_end, int tid,
                                                   int nthreads, TQ* out) {
  if (skip == nullptr || skip[int64_t(s) * Hkv + g] == 0) return false;
  const float* src = surrogate ? surrogate + (int64_t(s) * Hkv + g) * D : nullptr;
  for (int i = tid; i < (h_end - h_begin) * D; i += nthreads)
    out[(int64_t(s) * H + h_begin) * D + i] = from_f32<TQ>(src ? src[i % D] : 0.f);
  return true;
}

// Whether fn ran for (key, the current device) in this process; runs it the first time (once per
// key and device: a kernel's function attributes belong to each GPU's context, and tensor
// parallelism launches the same kernels on several GPUs). Cheap enough to call before every launch.
template <class F>
void once_per_device(const void* key, F fn) {
  static std::mutex mu;
  static std::vector<std::pair<const void*, int>> done;
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& d : done)
    if (d.first == key && d.second == dev) return;
  fn();
  done.emplace_back(key, dev);
}

// Raises a kernel's dynamic shared-memory limit to `bytes` on the current device (once per kernel
// and device); returns true. Launchers call it before every launch.
template <class Kernel>
bool allow_dynamic_smem(Kernel* kernel, int bytes) {
  once_per_device(reinterpret_cast<const void*>(kernel), [&] {
    VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
  return true;
}

// The shape preconditions of the tiled kernels (prefill and decode), named after `what`.
inline void check_tiled_attention(const PagedKVLayer& kv, int num_heads, const char* what) {
  VLM_CHECK(num_heads % kv.num_kv_heads == 0, "{}: H {} not a multiple of Hkv {}", what, num_heads, kv.num_kv_heads);
  VLM_CHECK((kv.block_size & (kv.block_size - 1)) == 0, "{}: block size {} not a power of two", what, kv.block_size);
  VLM_CHECK(kv.head_dim == 64 || kv.head_dim == 128, "{}: D {} not 64/128", what, kv.head_dim);
}

// For a BF16/F16 cache: calls fn(d, c, a) with d = std::integral_constant<int, D> (64 or 128),
// c a value of the cache's element type and a of the activations' (F32, BF16 or F16).
template <class Fn>
void dispatch_tensor_core(const PagedKVLayer& kv, DType act, Fn&& fn) {
  dispatch_float(act, [&](auto a) {
    const auto run = [&](auto c) {
      if (kv.head_dim == 64) fn(std::integral_constant<int, 64>{}, c, a);
      else fn(std::integral_constant<int, 128>{}, c, a);
    };
    if (kv.dtype == DType::BF16) run(__nv_bfloat16{});
    else run(__half{});
  });
}

// An F8_E4M3 cache's preconditions (its scales are set), named after `what`.
inline void check_fp8_cache(const PagedKVLayer& kv, const char* what) {
  VLM_CHECK(kv.k_scale != nullptr && kv.v_scale != nullptr, "{}: an F8_E4M3 cache without its k/v scales", what);
}

// For an F8_E4M3 cache: calls fn(d, a) with d = std::integral_constant<int, D> (64 or 128) and a
// a value of the activations' element type (F32, BF16 or F16).
template <class Fn>
void dispatch_fp8_cache(const PagedKVLayer& kv, DType act, Fn&& fn) {
  dispatch_float(act, [&](auto a) {
    if (kv.head_dim == 64) fn(std::integral_constant<int, 64>{}, a);
    else fn(std::integral_constant<int, 128>{}, a);
  });
}

}  // namespace vlm::cuda
