// CudaLookMStep: LOOK-M's part of the CudaDecoder (the CPU's run_look_m, on the GPU) for the
// prefill chunks that carry a LookMState (ForwardBatch::look_m).
//  - Per layer, after attention: the chunk's importance scores accumulate in a device copy of the
//    state's scores ([layers, Hkv, L] f32, LookMState::device_scores: it lives and dies with the
//    state, zeroed at a chunk that starts at position 0): every row ("full"), or the last `window`
//    rows of the chunk that finishes prefill ("window"); kernels/cuda/kv_compression.
//  - After the last layer of a step in which some states finish prefill: every layer's and head's
//    kept set is chosen on the device (look_m_select_kept: the CPU's select_kept_tokens ranking
//    exactly), every layer is merged and compacted on the device, all on `stream` without a host
//    sync; the scores are copied to the state (host) behind them; state.compressed_len is set from
//    the budget, so the engine's KVCompressor trims the block table and frees the tail in the same
//    step, as on the CPU.
// Prefill outputs use the uncompressed cache (the compaction runs after every layer's attention).
// Tensor parallelism (issue 42, `rank` of `ranks`): the selection is per KV head (each head's
// scores summed over its group's query heads, which a split rank holds all of), so with the KV
// heads split evenly each rank scores, selects, merges and compacts its own heads: every rank's
// kept sets are the ones one GPU would choose for those heads, with no collective (each head's
// score rows are the same on TP=1 and TP=N up to the f32 rounding of the split projections).
// The state is the model's ([layers, Hkv, L] host scores, Hkv the model's KV heads): rank r's
// device copy is device_scores[r] ([layers, its Hkv, L], sized by the backend before the ranks run;
// with ranks == 1 this step sizes it), its host rows are [kv_head_begin, + its Hkv) of each layer,
// and compressed_len (the same budget on every rank) is written by rank 0. Replicated KV heads
// (fewer KV heads than ranks: a group's query heads over several ranks, partial scores) are refused
// (InternalError; the backend refuses them at start and per request).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class CudaLookMStep {
 public:
  // Layer `layer`'s score work for the batch's LOOK-M chunks. q[T, H, D] (dtype act, this step's
  // post-RoPE queries); block_tables: the batch's tables on the device ([S, max_blocks]).
  void layer(int layer, const void* q, DType act, int num_heads, const PagedKVLayer& kv, const ForwardBatch& batch,
             const int32_t* block_tables, float scale, cudaStream_t stream, int rank = 0, int ranks = 1);
  // The compaction of every state finishing prefill this step (stream-ordered; the state's host
  // scores are written by a D2H copy on the stream, complete once the stream is). kv: every
  // layer's cache.
  void finish(const ForwardBatch& batch, const std::vector<PagedKVLayer>& kv, const int32_t* block_tables,
              cudaStream_t stream, int rank = 0, int ranks = 1);

 private:
  cuda::DeviceBuffer stats_, kept_, work_, is_text_;
};

}  // namespace vlm
