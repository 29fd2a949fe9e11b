// SinkRouter decode routing on the GPU (paper §4, ALGORITHMS.md §8; the CPU's kernels/sink_router).
// Everything is decided on the device: the anchors are gathered from the cache, each decode row's
// kv groups are scored and compared with tau(L) of the row's context length read on the device,
// and the flags go to the split-K decode kernel through CudaAttentionBatch::group_skip, whose
// CTAs of a sink group write the surrogate and return before loading any K/V. No host round trip
// and no launch shape that depends on a decision, so the step stays capturable in a CUDA graph.
//
// The score arithmetic repeats the CPU's sink_group_scores exactly (one thread per query head, f32,
// the same order of operations, no FMA contraction; IEEE sqrt and division) and tau(L) is
// SinkRouterConfig::threshold's double arithmetic, so on the same q and anchors the decisions are
// the CPU's bit for bit. Contract as kernels/cuda/attention/cuda_attention.h: device pointers,
// work on `stream`, no sync, no allocation. An F8_E4M3 cache (kv.k_scale/v_scale set) is read as
// the values it represents (fp8 * the head's scale), so anchors and scores are those of the
// dequantized cache.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/dtype.h"
#include "kernels/sink_router/sink_router_config.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// anchor_k[S, Hkv, D] (and anchor_v, when not null) = slot 0 of block block_tables[s, 0] of the
// layer, converted to f32 (the CPU's load_first_token_kv for every sequence).
void sink_gather_anchors(const PagedKVLayer& kv, const int32_t* block_tables /*[S,max_blocks]*/,
                         int max_blocks_per_seq, int num_seqs, float* anchor_k /*[S,Hkv,D]*/,
                         float* anchor_v /*[S,Hkv,D] or null*/, cudaStream_t stream);

// For each sequence s with routed[s] != 0 (routed null: every sequence): scores[s, g] =
// agg_{h in g} cos(q[s, h], anchor_k[s, g]) and skip[s, g] = scores[s, g] >= tau(context_lens[s]);
// skip_count[s] (when not null) += the number of sink groups (atomic). Sequences not routed get
// skip 0 and score 0. q [S, H, D] in dtype act (one decode row per sequence). scores may be null.
// Preconditions: H % Hkv == 0; H <= 1024; (H + (Hkv + H)(D + 1)) f32 fit in 48 KiB of shared memory.
void sink_route_groups(const void* q /*[S,H,D]*/, DType act, int num_heads, const float* anchor_k /*[S,Hkv,D]*/,
                       int num_kv_heads, int head_dim, const int32_t* context_lens /*[S]*/,
                       const uint8_t* routed /*[S] or null*/, int num_seqs, const SinkRouterConfig& config,
                       float* scores /*[S,Hkv] or null*/, uint8_t* skip /*[S,Hkv]*/,
                       int32_t* skip_count /*[S] or null*/, cudaStream_t stream);

// sink_gather_anchors and sink_route_groups in one launch (the decode step's): the anchor keys are
// read from the cache's first slot of each sequence (the same values, so the same scores and
// decisions bit for bit); anchor_v (when not null) receives the anchor values [S, Hkv, D] f32.
void sink_route_from_cache(const void* q /*[S,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                           const int32_t* block_tables /*[S,max_blocks]*/, int max_blocks_per_seq,
                           const int32_t* context_lens /*[S]*/, const uint8_t* routed /*[S] or null*/, int num_seqs,
                           const SinkRouterConfig& config, float* scores /*[S,Hkv] or null*/,
                           uint8_t* skip /*[S,Hkv]*/, int32_t* skip_count /*[S] or null*/,
                           float* anchor_v /*[S,Hkv,D] or null*/, cudaStream_t stream);

// A sequence's anchor store [2, num_layers, Hkv, D] f32 in device memory (K then V): layer
// `layer`'s part = slot 0 of block block_table[0] (sink_gather_anchors for one sequence). The
// decoder fills every layer at the end of the sequence's prefill, before any KV compression, as
// the CPU's SinkRouterAttention captures its anchors.
void sink_capture_anchors(const PagedKVLayer& kv, const int32_t* block_table /*[>=1] device*/, int layer,
                          int num_layers, float* store /*[2,L,Hkv,D]*/, cudaStream_t stream);

// sink_route_groups with each sequence's anchor keys read from layer `layer` of its store
// (stores[s], a device pointer to [2, num_layers, Hkv, D] f32 as sink_capture_anchors fills it; a
// null store reads zeros and must not be routed); anchor_v (when not null) receives the stores'
// anchor values [S, Hkv, D] f32. One launch; stores is a device array, so a captured graph reads
// the pointers of each replay's sequences.
void sink_route_from_stores(const void* q /*[S,H,D]*/, DType act, int num_heads, const float* const* stores /*[S]*/,
                            int layer, int num_layers, int num_kv_heads, int head_dim,
                            const int32_t* context_lens /*[S]*/, const uint8_t* routed /*[S] or null*/, int num_seqs,
                            const SinkRouterConfig& config, float* scores /*[S,Hkv] or null*/,
                            uint8_t* skip /*[S,Hkv]*/, int32_t* skip_count /*[S] or null*/,
                            float* anchor_v /*[S,Hkv,D] or null*/, cudaStream_t stream);

// Calibration (vlm-calibrate-sink --device cuda): mass[s, h] = the softmax weight head h of
// sequence s's decode row gives its first cached key under full attention over its
// context_lens[s] keys (the CPU's first_token_attention_mass, f32 logits; within f32 rounding of
// it, not bit for bit). Sequences with routed[s] == 0 (routed not null) get 0. Reads every key: a
// calibration tool, not a decode-path kernel. Preconditions: H % Hkv == 0; D <= 1024.
void sink_first_token_mass(const void* q /*[S,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                           const int32_t* block_tables /*[S,max_blocks]*/, int max_blocks_per_seq,
                           const int32_t* context_lens /*[S]*/, const uint8_t* routed /*[S] or null*/, int num_seqs,
                           float scale, float* mass /*[S,H]*/, cudaStream_t stream);

}  // namespace vlm::cuda
