// The oracle of SinkRouter's routing proxy (paper eq. 10, Appendix C): for one decode row, the
// exact softmax weight that each query head gives to the sequence's first cached token under
// full attention over its paged cache, and that weight aggregated over each GQA group like the
// routing score (eq. 12: min / mean / max over the group's heads).
//
// first_token_attention_mass reads every cached key of the row's sequence (a calibration and test
// tool, not a decode-path kernel): f32 logits with a running max; the _ref gathers in double.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"
#include "kernels/sink_router/sink_router_config.h"

namespace vlm {

// mass[h] = softmax_j(scale * q[h]·k_j)[0] over the context_len cached keys of kv head h / G,
// where key j sits in block block_table[j / B], slot j % B.
// Preconditions: H % Hkv == 0; context_len >= 1; the first ceil(context_len / B) entries of
// block_table are in [0, num_blocks) (InternalError otherwise).
void first_token_attention_mass(const float* q /*[H,D]*/, int num_heads, const PagedKVLayer& kv,
                                const int32_t* block_table, int context_len, float scale,
                                float* mass /*[H]*/);
void first_token_attention_mass_ref(const float* q /*[H,D]*/, int num_heads, const PagedKVLayer& kv,
                                    const int32_t* block_table, int context_len, float scale,
                                    float* mass /*[H]*/);

// group_mass[g] = agg_{h in group g} mass[h] (G = H / Hkv consecutive heads per group).
void aggregate_group_mass(const float* mass /*[H]*/, int num_heads, int num_kv_heads,
                          SinkAggregation agg, float* group_mass /*[Hkv]*/);

}  // namespace vlm
