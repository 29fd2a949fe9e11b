// Causal attention of a flat batch of query tokens over the paged KV cache, with GQA.
//
// The batch holds num_seqs sequences; sequence s owns query rows [cu_seqlens_q[s],
// cu_seqlens_q[s+1]) of q, and its cache holds context_lens[s] tokens (this step's tokens
// included: they were written with write_kv before the call), laid out in the blocks listed in
// block_tables[s * max_blocks_per_seq + j]. Query row i of sequence s (q_len rows) sits at
// cache position context_lens[s] - q_len + i and attends keys [0, that position] — prefill
// chunks and single decode tokens mix freely. Query head h reads kv head h / (H / Hkv).
//
// paged_attention is tiled with an online softmax (flash style: running max, running sum,
// rescaled accumulator), never materialising a score row; work is split over the global thread
// pool by (sequence, kv head, query tile). paged_attention_ref gathers each sequence's K/V and
// runs a plain two-pass softmax in double.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"

namespace vlm {

struct AttentionBatch {
  int num_seqs = 0;
  const int32_t* cu_seqlens_q = nullptr;   // [num_seqs + 1], cu_seqlens_q[0] = 0
  const int32_t* context_lens = nullptr;   // [num_seqs]
  const int32_t* block_tables = nullptr;   // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
};

// q[T, H, D] f32 (post-RoPE), out[T, H, D] f32; scale multiplies q·k (usually 1/sqrt(D)).
// Preconditions: H % Hkv == 0; context_lens[s] >= q_len(s); every block id in the first
// ceil(context_lens[s] / B) entries of a row is in [0, num_blocks).
void paged_attention(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                     const AttentionBatch& batch, float scale, float* out /*[T,H,D]*/);

// Process-wide switch (default off: the exact path): with a BF16 cache on a CPU with
// AVX512-BF16 (head_dim a multiple of 32), paged_attention rounds q (once per call) and the
// softmax probabilities (per key tile) to bf16 and sums q·k and p·v with vdpbf16ps on K and V as
// stored (attn::tile_ops_avx512_bf16). Set with the CPU compute dtype (engine/compute_dtype.h:
// on for bf16). An F32/F16 cache or another CPU always runs the f32 tiles. Not safe while
// kernels run.
void set_bf16_attention(bool enabled);
bool bf16_attention();

void paged_attention_ref(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                         const AttentionBatch& batch, float scale, float* out /*[T,H,D]*/);

}  // namespace vlm
