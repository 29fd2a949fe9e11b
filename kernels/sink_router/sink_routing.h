// SinkRouter routing score (paper eq. 11-13): for one decode row, the cosine of each query head
// with its group's anchor key (the post-RoPE key of the sequence's first cached token),
// aggregated over the G = H / Hkv heads of the group, compared with tau(L).
//
// sink_group_scores computes in f32 (O(H·D), no KV read); sink_group_scores_ref in double.
// A zero query or anchor has cosine 0.
#pragma once

#include <cstdint>

#include "kernels/sink_router/sink_router_config.h"

namespace vlm {

// scores[g] = agg_{h in group g} cos(q[h], anchor_k[g]). Preconditions: H % Hkv == 0.
void sink_group_scores(const float* q /*[H,D]*/, int num_heads, const float* anchor_k /*[Hkv,D]*/,
                       int num_kv_heads, int head_dim, SinkAggregation agg,
                       float* scores /*[Hkv]*/);
void sink_group_scores_ref(const float* q /*[H,D]*/, int num_heads,
                           const float* anchor_k /*[Hkv,D]*/, int num_kv_heads, int head_dim,
                           SinkAggregation agg, float* scores /*[Hkv]*/);

// skip[g] = 1 when scores[g] >= tau (a sink group), else 0. Returns the number of sink groups.
int sink_route_groups(const float* scores /*[Hkv]*/, int num_kv_heads, double tau,
                      uint8_t* skip /*[Hkv]*/);

}  // namespace vlm
