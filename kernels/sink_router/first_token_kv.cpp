#include "kernels/sink_router/first_token_kv.h"

#include "kernels/core/check.h"

namespace vlm {

void load_first_token_kv(const PagedKVLayer& kv, int32_t first_block, float* k_out, float* v_out) {
  VLM_CHECK(first_block >= 0 && first_block < kv.num_blocks, "first block {} outside [0, {})", first_block,
            kv.num_blocks);
  const int64_t esize = static_cast<int64_t>(dtype_size(kv.dtype));
  for (int h = 0; h < kv.num_kv_heads; ++h) {
    const int64_t off = (first_block * kv.block_stride() + h * kv.head_stride()) * esize;  // slot 0
    convert_to_f32(static_cast<const char*>(kv.k) + off, kv.dtype, k_out + static_cast<int64_t>(h) * kv.head_dim,
                   kv.head_dim);
    convert_to_f32(static_cast<const char*>(kv.v) + off, kv.dtype, v_out + static_cast<int64_t>(h) * kv.head_dim,
                   kv.head_dim);
  }
}

}  // namespace vlm
