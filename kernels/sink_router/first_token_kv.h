// The SinkRouter anchor of one layer (paper eq. 7): the post-RoPE key and the value of a
// sequence's first cached token, for every kv head, read back from the paged cache (so the
// anchor is exactly what attention reads, in the cache's dtype rounding).
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"

namespace vlm {

// k_out[Hkv, D], v_out[Hkv, D] = slot 0 of block block_table[0], converted to f32.
// Precondition: 0 <= first_block < kv.num_blocks (InternalError otherwise).
void load_first_token_kv(const PagedKVLayer& kv, int32_t first_block, float* k_out /*[Hkv,D]*/,
                         float* v_out /*[Hkv,D]*/);

}  // namespace vlm
