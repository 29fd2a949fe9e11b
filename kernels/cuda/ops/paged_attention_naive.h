// The paged KV cache on the GPU and a plain attention over it: the simple, obviously-right
// version (CUDA cores, one thread block per (token, head), online softmax), the reference the
// tensor-core kernels of kernels/cuda/attention are checked against, and the decoder's fallback.
// Cache layout per layer, as on the CPU (kernels/attention/paged_kv.h): k_cache and v_cache
// [num_blocks, Hkv, B, D] in dt; token slot s lives in block s / B at offset s % B.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

struct PagedKVView {
  void* k = nullptr;  // [num_blocks, Hkv, B, D] dt
  void* v = nullptr;  // [num_blocks, Hkv, B, D] dt
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  DType dtype = DType::F32;
};

// Writes each token's K and V (rows of stride `stride` elements, Hkv heads of D, dt == cache
// dtype) into its slot: cache[slot_mapping[t]]. Slots < 0 are skipped.
void paged_kv_write(const void* k, const void* v, int64_t stride, const int32_t* slot_mapping, int64_t T,
                    const PagedKVView& kv, cudaStream_t s);

// One step's attention metadata (device arrays), ForwardBatch's fields.
struct AttentionMeta {
  const int32_t* cu_seqlens_q = nullptr;  // [S + 1]
  const int32_t* context_lens = nullptr;  // [S] cached tokens after this step
  const int32_t* block_tables = nullptr;  // [S, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  int64_t num_tokens = 0;  // T
};

// out[t, h, :] = softmax(q[t, h] . K[0..p]^T * scale) V[0..p] over the token's sequence's cache,
// causal: token i of a chunk of n rows sits at cache position context_len - n + i and sees
// positions [0, that]. q: T rows of stride q_stride (dt), H heads of D; GQA: head h reads kv
// head h / (H / Hkv). out [T, H * D] dt. D <= 256.
void paged_attention_naive(const void* q, int64_t q_stride, int64_t H, const PagedKVView& kv,
                           const AttentionMeta& meta, float scale, void* out, cudaStream_t s);

}  // namespace vlm::cuda
