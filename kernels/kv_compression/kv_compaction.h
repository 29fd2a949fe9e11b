// LOOK-M compaction of one sequence's KV in one layer of the paged cache: for each KV head,
// select the kept positions from that head's scores (token_selection.h), merge the evicted
// entries into them (kv_merge.h), and write the kept entries, in position order, into the
// sequence's first C = min(L, N + M) cache slots. Keys keep the RoPE rotation of their
// original position (positions are not re-rotated); every head keeps the same count C.
// Slots [C, L) are left as they were (the caller trims them off the block table).
//
// compact_sequence_kv runs the heads on the global thread pool with the optimized kernels;
// compact_sequence_kv_ref runs them one by one with the reference kernels.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"
#include "kernels/kv_compression/look_m_params.h"

namespace vlm {

// block_table covers ceil(L / B) blocks owned by this sequence alone. scores[Hkv, stride]
// (stride >= L), is_text[L]. Returns C, the new cache length.
int32_t compact_sequence_kv(const PagedKVLayer& kv, const int32_t* block_table, int32_t L,
                            const float* scores /*[Hkv,stride]*/, int64_t stride,
                            const uint8_t* is_text /*[L]*/, const LookMParams& p);
int32_t compact_sequence_kv_ref(const PagedKVLayer& kv, const int32_t* block_table, int32_t L,
                                const float* scores /*[Hkv,stride]*/, int64_t stride,
                                const uint8_t* is_text /*[L]*/, const LookMParams& p);

// Writes k[n, D], v[n, D] (f32) to kv head h of cache positions [0, n) (converted to the cache
// dtype).
void scatter_kv_head(const PagedKVLayer& kv, const int32_t* block_table, int32_t n, int h,
                     const float* k /*[n,D]*/, const float* v /*[n,D]*/);

}  // namespace vlm
