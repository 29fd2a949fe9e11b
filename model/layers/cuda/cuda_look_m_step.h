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
             const int32_t* block_tables, float scale, cudaStream_t stream);
  // The compaction of every state finishing prefill this step (stream-ordered; the state's host
  // scores are written by a D2H copy on the stream, complete once the stream is). kv: every
  // layer's cache.
  void finish(const ForwardBatch& batch, const std::vector<PagedKVLayer>& kv, const int32_t* block_tables,
              cudaStream_t stream);

 private:
  cuda::DeviceBuffer stats_, kept_, work_, is_text_;
};

}  // namespace vlm
