#include "engine/scheduling/kv_cache.h"

#include <cstring>

#include "kernels/core/check.h"

namespace vlm {

int64_t KVCacheShape::bytes_per_block() const {
  return 2 * num_layers * num_kv_heads * static_cast<int64_t>(block_size) * head_dim *
         static_cast<int64_t>(dtype_size(dtype));
}

KVCache::KVCache(const KVCacheShape& shape) : shape_(shape) {
  VLM_CHECK(shape.num_layers > 0 && shape.num_blocks > 0 && shape.block_size > 0 &&
                shape.num_kv_heads > 0 && shape.head_dim > 0,
            "KV cache shape: {} layers, {} blocks of {}, {} kv heads of {}", shape.num_layers,
            shape.num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim);
  VLM_CHECK(shape.dtype == DType::F32 || shape.dtype == DType::BF16 || shape.dtype == DType::F16,
            "KV cache dtype {}", dtype_name(shape.dtype));
  const Shape s{shape.num_blocks, shape.num_kv_heads, shape.block_size, shape.head_dim};
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    storage_.push_back(Tensor::zeros(s, shape.dtype));
    storage_.push_back(Tensor::zeros(s, shape.dtype));
    PagedKVLayer layer;
    layer.k = storage_[storage_.size() - 2].data();
    layer.v = storage_.back().data();
    layer.dtype = shape.dtype;
    layer.num_blocks = shape.num_blocks;
    layer.block_size = shape.block_size;
    layer.num_kv_heads = shape.num_kv_heads;
    layer.head_dim = shape.head_dim;
    layers_.push_back(layer);
  }
}

int64_t KVCache::total_bytes() const {
  int64_t n = 0;
  for (const auto& t : storage_) n += t.nbytes();
  return n;
}

}  // namespace vlm

namespace vlm {

void KVCache::copy_block(int32_t src, int32_t dst) {
  VLM_CHECK(src >= 0 && src < shape_.num_blocks && dst >= 0 && dst < shape_.num_blocks && src != dst,
            "copy block {} to {} of {}", src, dst, shape_.num_blocks);
  for (const PagedKVLayer& l : layers_) {
    const int64_t bytes = l.block_stride() * static_cast<int64_t>(dtype_size(l.dtype));
    for (void* base : {l.k, l.v}) {
      auto* p = static_cast<char*>(base);
      std::memcpy(p + dst * bytes, p + src * bytes, static_cast<size_t>(bytes));
    }
  }
}

}  // namespace vlm
