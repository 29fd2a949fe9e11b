// The paged KV cache as kernels see it: per layer, K and V arrays of fixed-size blocks.
// Layout of one layer: k[num_blocks, Hkv, B, D], v the same; token slot s lives in block s / B at
// offset s % B. The storage dtype may be F32, BF16 or F16; kernels convert on load and store.
// The GPU also stores F8_E4M3 (--kv-cache-dtype fp8; cuda_attention.h): element x of KV head h is
// stored as e4m3(x * (1 / scale[h])) and read as fp8(q) * scale[h] (vLLM's convention), with
// static per-layer, per-head scales k_scale/v_scale (the checkpoint's, else 1.0).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"

namespace vlm {

struct PagedKVLayer {
  void* k = nullptr;  // [num_blocks, Hkv, B, D]
  void* v = nullptr;  // [num_blocks, Hkv, B, D]
  DType dtype = DType::F32;
  int64_t num_blocks = 0;
  int block_size = 16;    // B
  int num_kv_heads = 0;   // Hkv
  int head_dim = 0;       // D
  // F8_E4M3 only: per-head scales [Hkv] f32, in the memory the kernels run in (device memory on
  // the GPU); null for the other dtypes.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;

  int64_t head_stride() const { return static_cast<int64_t>(block_size) * head_dim; }
  int64_t block_stride() const { return num_kv_heads * head_stride(); }
};

// Writes k[T, Hkv, D] and v[T, Hkv, D] (f32) to the slots slot_mapping[T] of the layer
// (converted to its dtype). A slot of -1 skips that token. Slots must be < num_blocks * B.
void write_kv(const PagedKVLayer& layer, const float* k /*[T,Hkv,D]*/,
              const float* v /*[T,Hkv,D]*/, const int32_t* slot_mapping /*[T]*/, int64_t T);

// Walks KV head h's first n cached rows of a sequence, one block at a time: calls
// fn(byte_offset, first_row, rows) where byte_offset locates the block's rows of head h in k (and
// in v: same layout), contiguous [rows, D] in the layer's dtype. Throws InternalError for a
// block id outside [0, num_blocks).
template <class Fn>
void for_each_head_block(const PagedKVLayer& kv, const int32_t* block_table, int32_t n, int h, Fn&& fn) {
  const int B = kv.block_size;
  const int64_t esize = static_cast<int64_t>(dtype_size(kv.dtype));
  for (int32_t j0 = 0; j0 < n; j0 += B) {
    const int32_t block = block_table[j0 / B];
    VLM_CHECK(block >= 0 && block < kv.num_blocks, "block {} outside [0, {})", block, kv.num_blocks);
    fn((block * kv.block_stride() + h * kv.head_stride()) * esize, j0, std::min(B, n - j0));
  }
}

}  // namespace vlm
