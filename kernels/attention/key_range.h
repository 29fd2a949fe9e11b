// One work item of the CPU attention kernels, shared by paged_attention (prefill and decode
// rows) and the SinkRouter group-skipping decode (kernels/sink_router/group_skip_decode.cpp):
// M query vectors (a few query rows x the G query heads of one kv head) against a range of that
// kv head's cached keys, one key tile at a time through attn::TileOps, with the online-softmax
// state (acc, m, l) in per-thread buffers. Split-K: a range that is one part of a longer one
// stores its state as a partial; merge_partials combines the parts in f32.
//
// Partial layout (floats): acc[M, Dp], then m[M], then l[M]; stride M * (Dp + 2).
#pragma once

#include <cstdint>

#include "kernels/attention/paged_attention_internal.h"

namespace vlm::attn {

// The online-softmax state of one work item, in this thread's scratch (valid until the thread
// starts the next item).
struct KeyRangeState {
  int M = 0, Dp = 0;
  float* qt = nullptr;     // [M, Dp] queries, pre-scaled
  float* acc = nullptr;    // [M, Dp]
  float* m_run = nullptr;  // [M]
  float* l_run = nullptr;  // [M, kSumLanes]
  float total(int m) const;  // l of query vector m (the sum of its lanes)
};

// Takes this thread's buffers for M = rows * G query vectors and loads them: vector r * G + g is
// head kvh * G + g of token row t0 + r of q [T, H, D], times qscale, zero-padded to Dp, then
// put into ops' query format (TileOps::prepare_q).
KeyRangeState begin_key_range(const TileOps& ops, const float* q /*[T,H,D]*/, int H, int D, int Dp, int64_t t0,
                              int rows, int kvh, int G, float qscale);

// Runs keys [k_begin, k_end) of kv head kvh (through the block-table row) over the state.
// first_pos >= 0: causal, query row r sees keys <= first_pos + r; first_pos < 0: every key.
void run_key_range(const TileOps& ops, const PagedKVLayer& kv, const int32_t* block_row, int kvh,
                   int k_begin, int k_end, int G, int first_pos, KeyRangeState& st);

// out row of query vector m: acc / l, D values.
void store_normalized(const KeyRangeState& st, int m, int D, float* o /*[D]*/);
// The partial of this item at p (layout above).
void store_partial(const KeyRangeState& st, float* p /*[M * (Dp + 2)]*/);

// Query vector m of num_parts partials at base (stride M * (Dp + 2) floats):
// mt = max_p m_p, l = sum_p l_p 2^(m_p - mt), o = sum_p acc_p 2^(m_p - mt) / l.
void merge_partials(const float* base, int num_parts, int M, int Dp, int D, int m, float* o /*[D]*/);

}  // namespace vlm::attn
