// Paged KV gather (contract in paged_kv_gather.h): one thread per 8 elements of a (token, KV head)
// row; 16-byte loads and stores for bf16/f16 (two for f32).
#include "kernels/cuda/attention/paged_kv_gather.h"

#include <cuda_runtime.h>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {
namespace {

template <class T>
__global__ void kv_gather_kernel(KVView kv, const int32_t* __restrict__ table, int64_t n, T* __restrict__ k_out,
                                 T* __restrict__ v_out) {
  struct alignas(8 * sizeof(T)) Chunk { T x[8]; };
  const int D8 = kv.head_dim / 8;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // 8-element chunk of [n, Hkv, D]
  if (i >= n * kv.num_kv_heads * D8) return;
  const int64_t row = i / D8;  // t * Hkv + h
  const int64_t t = row / kv.num_kv_heads;
  const int h = int(row % kv.num_kv_heads), c = int(i % D8);
  const int64_t src = kv.offset(table[t / kv.block_size], h, int(t % kv.block_size)) + c * 8;
  *reinterpret_cast<Chunk*>(k_out + i * 8) = *reinterpret_cast<const Chunk*>(static_cast<const T*>(kv.k) + src);
  *reinterpret_cast<Chunk*>(v_out + i * 8) = *reinterpret_cast<const Chunk*>(static_cast<const T*>(kv.v) + src);
}

}  // namespace

bool paged_kv_gather_supported(const PagedKVLayer& kv) {
  return (kv.dtype == DType::BF16 || kv.dtype == DType::F16 || kv.dtype == DType::F32) && kv.head_dim > 0 &&
         kv.head_dim % 8 == 0 && kv.num_kv_heads > 0 && kv.block_size > 0;
}

void paged_kv_gather(const PagedKVLayer& kv, const int32_t* table, int64_t n, void* k_out, void* v_out,
                     cudaStream_t stream) {
  VLM_CHECK(paged_kv_gather_supported(kv), "paged_kv_gather: cache {} D {}", dtype_name(kv.dtype), kv.head_dim);
  if (n <= 0) return;
  const int64_t chunks = n * kv.num_kv_heads * (kv.head_dim / 8);
  const unsigned blocks = static_cast<unsigned>((chunks + 255) / 256);
  const KVView view = kv_view(kv);
  if (kv.dtype == DType::F32) {
    kv_gather_kernel<<<blocks, 256, 0, stream>>>(view, table, n, static_cast<float*>(k_out), static_cast<float*>(v_out));
  } else {  // bf16 and f16: 2-byte raw copies
    kv_gather_kernel<<<blocks, 256, 0, stream>>>(view, table, n, static_cast<uint16_t*>(k_out),
                                                 static_cast<uint16_t*>(v_out));
  }
  VLM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace vlm::cuda
