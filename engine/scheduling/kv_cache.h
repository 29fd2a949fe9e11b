// KVCache: the memory of the paged KV cache for all layers (one K and one V array per layer,
// each [num_blocks, Hkv, B, D] in the cache dtype). Which blocks belong to which sequence is the
// BlockManager's business; this class only owns the bytes and hands out per-layer views.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/tensor.h"

namespace vlm {

struct KVCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int block_size = 16;   // B
  int num_kv_heads = 0;  // Hkv
  int head_dim = 0;      // D
  DType dtype = DType::F32;

  // Bytes of K plus V for one block across all layers.
  int64_t bytes_per_block() const;
};

class KVCache {
 public:
  // Allocates (zero-filled) storage. Throws std::bad_alloc when it does not fit.
  explicit KVCache(const KVCacheShape& shape);

  const KVCacheShape& shape() const { return shape_; }
  const std::vector<PagedKVLayer>& layers() const { return layers_; }
  int64_t total_bytes() const;
  // Copies block src's K and V to block dst, in every layer (copy-on-write of shared blocks).
  void copy_block(int32_t src, int32_t dst);

 private:
  KVCacheShape shape_;
  std::vector<Tensor> storage_;  // 2 per layer: K, V
  std::vector<PagedKVLayer> layers_;
};

}  // namespace vlm
