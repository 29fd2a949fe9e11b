// Paged KV write: one thread per 8 elements of a (token, KV head) row: one 16- or 32-byte load of
// k and v each, converted, one vector store into the token's slot.
#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"

namespace vlm::cuda {
namespace {

template <class TIn, class TOut>
__device__ __forceinline__ void copy8(const TIn* src, TOut* dst) {
  struct alignas(8 * sizeof(TIn)) In { TIn x[8]; };
  struct alignas(8 * sizeof(TOut)) Out { TOut x[8]; };
  const In a = *reinterpret_cast<const In*>(src);
  Out b;
#pragma unroll
  for (int i = 0; i < 8; ++i) b.x[i] = from_f32<TOut>(to_f32(a.x[i]));
  *reinterpret_cast<Out*>(dst) = b;
}

template <class TIn, class TOut>
__global__ void kv_write_kernel(KVView kv, const TIn* __restrict__ k, const TIn* __restrict__ v,
                                const int32_t* __restrict__ slots, int64_t T) {
  const int D8 = kv.head_dim / 8;
  const int64_t n = T * kv.num_kv_heads * D8;  // 8-element chunks
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / D8;  // t * Hkv + h
  const int64_t t = row / kv.num_kv_heads;
  const int h = int(row % kv.num_kv_heads), c = int(i % D8);
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t dst = kv.offset(slot / kv.block_size, h, slot % kv.block_size) + c * 8;
  copy8(k + i * 8, static_cast<TOut*>(kv.k) + dst);
  copy8(v + i * 8, static_cast<TOut*>(kv.v) + dst);
}

}  // namespace

void paged_kv_write(const PagedKVLayer& kv, const void* k, const void* v, DType act,
                    const int32_t* slot_mapping, int64_t T, cudaStream_t stream) {
  VLM_CHECK(kv.head_dim % 8 == 0, "paged_kv_write: D {} not a multiple of 8", kv.head_dim);
  if (T == 0) return;
  const int64_t chunks = T * kv.num_kv_heads * (kv.head_dim / 8);
  const int threads = 256;
  const unsigned blocks = unsigned((chunks + threads - 1) / threads);
  dispatch_float(act, [&](auto a) {
    dispatch_float(kv.dtype, [&](auto c) {
      using TIn = decltype(a);
      using TOut = decltype(c);
      kv_write_kernel<TIn, TOut><<<blocks, threads, 0, stream>>>(
          kv_view(kv), static_cast<const TIn*>(k), static_cast<const TIn*>(v), slot_mapping, T);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
