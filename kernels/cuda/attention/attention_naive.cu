// Naive references: the KV write (one thread per element) and paged attention (one thread block
// per query row and head, scores in shared memory, plain max / sum / P·V in f32). An F8_E4M3
// cache: element by element, fp8_kv_store under the head's scale, fp8_kv_load times it.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"

namespace vlm::cuda {
namespace {

constexpr int kNaiveMaxContext = 12000;  // scores of one row within 48 KB of static shared memory
constexpr int kNaiveThreads = 128;

__global__ void kv_write_naive_kernel(KVView kv, DType cache, const void* k, const void* v, DType act,
                                      const int32_t* slots, int64_t T) {
  const int Hkv = kv.num_kv_heads, D = kv.head_dim;
  const int64_t n = T * Hkv * D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / (Hkv * D);
    const int h = int(i / D % Hkv), d = int(i % D);
    const int32_t slot = slots[t];
    if (slot < 0) continue;
    const int64_t dst = kv.offset(slot / kv.block_size, h, slot % kv.block_size) + d;
    if (cache == DType::F8_E4M3) {
      static_cast<uint8_t*>(kv.k)[dst] = fp8_kv_store(load_f32(k, act, i), 1.f / kv.k_scale[h]);
      static_cast<uint8_t*>(kv.v)[dst] = fp8_kv_store(load_f32(v, act, i), 1.f / kv.v_scale[h]);
      continue;
    }
    store_f32(kv.k, cache, dst, load_f32(k, act, i));
    store_f32(kv.v, cache, dst, load_f32(v, act, i));
  }
}

__device__ float block_reduce(float x, bool is_max, float* red) {
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < kNaiveThreads / 32; ++w) x = is_max ? fmaxf(x, red[w]) : x + red[w];
  __syncthreads();
  return x;
}

// grid (max_q_len, H, num_seqs): block (i, h, s) computes row i of sequence s (if i < q_len).
__global__ void attention_naive_kernel(const void* q, DType act, int H, KVView kv, DType cache,
                                       CudaAttentionBatch batch, float scale, void* out) {
  __shared__ float scores[kNaiveMaxContext];
  __shared__ float red[kNaiveThreads / 32];
  const int i = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int q_len = batch.cu_seqlens_q[s + 1] - batch.cu_seqlens_q[s];
  if (i >= q_len) return;
  const int t = batch.cu_seqlens_q[s] + i;
  const int D = kv.head_dim, B = kv.block_size;
  const int hk = h / (H / kv.num_kv_heads);
  const int pos = batch.context_lens[s] - q_len + i;
  const int32_t* table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  const int64_t qrow = (int64_t(t) * H + h) * D;
  auto row_offset = [&](int j) {  // element offset of key j's row of head hk
    return kv.offset(table[j / B], hk, j % B);
  };
  const bool fp8 = cache == DType::F8_E4M3;
  const float ks = fp8 ? kv.k_scale[hk] : 1.f, vs = fp8 ? kv.v_scale[hk] : 1.f;

  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
    const int64_t kr = row_offset(j);
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += load_f32(q, act, qrow + d) * (load_f32(kv.k, cache, kr + d) * ks);
    scores[j] = dot * scale;
    mx = fmaxf(mx, scores[j]);
  }
  mx = block_reduce(mx, true, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j <= pos; j += blockDim.x) {
    scores[j] = expf(scores[j] - mx);
    sum += scores[j];
  }
  sum = block_reduce(sum, false, red);  // its barrier also publishes scores[]
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j <= pos; ++j) acc += scores[j] * (load_f32(kv.v, cache, row_offset(j) + d) * vs);
    store_f32(out, act, qrow + d, acc / sum);
  }
}

}  // namespace

void paged_kv_write_naive(const PagedKVLayer& kv, const void* k, const void* v, DType act,
                          const int32_t* slot_mapping, int64_t T, cudaStream_t stream) {
  if (T == 0) return;
  if (kv.dtype == DType::F8_E4M3) check_fp8_cache(kv, "paged_kv_write_naive");
  kv_write_naive_kernel<<<1024, 256, 0, stream>>>(kv_view(kv), kv.dtype, k, v, act, slot_mapping, T);
  VLM_CUDA_CHECK_LAUNCH();
}

void paged_attention_naive(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                           const CudaAttentionBatch& batch, float scale, void* out, cudaStream_t stream) {
  VLM_CHECK(batch.max_context_len <= kNaiveMaxContext, "naive attention: context {} > {}",
            batch.max_context_len, kNaiveMaxContext);
  VLM_CHECK(num_heads % kv.num_kv_heads == 0, "H {} not a multiple of Hkv {}", num_heads, kv.num_kv_heads);
  if (kv.dtype == DType::F8_E4M3) check_fp8_cache(kv, "naive attention");
  if (batch.num_seqs == 0 || batch.max_q_len == 0) return;
  const dim3 grid(batch.max_q_len, num_heads, batch.num_seqs);
  attention_naive_kernel<<<grid, kNaiveThreads, 0, stream>>>(q, act, num_heads, kv_view(kv), kv.dtype, batch,
                                                                 scale, out);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
