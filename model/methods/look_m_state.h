// LookMState: one sequence's LOOK-M work while its prompt is prefilled. The engine creates it at
// the sequence's first prefill chunk and hands it to the step through ForwardBatch::look_m; the
// attention layer (run_look_m) accumulates importance scores per layer and, in the chunk that
// finishes prefill, compacts each layer's KV into the sequence's first compressed_len slots.
// The engine then trims the block table to compressed_len.
//
// Prefill's own outputs always use the uncompressed cache: compaction runs after that layer's
// attention. A preempted sequence is recomputed from its tokens and compressed again (a fresh
// state).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/kv_compression/look_m_params.h"
#include "model/decoder/modality.h"

namespace vlm {

struct ForwardBatch;

struct LookMState {
  // prefill_len: cache tokens once prefill ends (L); tags[L] (empty: all text).
  LookMState(const LookMParams& params, int num_layers, int num_kv_heads, int32_t prefill_len,
             const std::vector<ModalityTag>& tags);

  LookMParams params;
  int num_layers = 0;
  int num_kv_heads = 0;
  int32_t prefill_len = 0;       // L
  std::vector<uint8_t> is_text;  // [L]
  // [num_layers, Hkv, L] on the host: the CPU path accumulates here (allocated, zeroed, by its first
  // layer_scores call); a GPU backend keeps its scores on the device and copies them here at the
  // end of prefill only when this is already sized (tests, inspection: call host_scores() first).
  std::vector<float> scores;
  int32_t compressed_len = -1;   // cache length after compaction (-1: not yet); same for all layers
  // A GPU backend's device copies of `scores` while the prompt is prefilled, one per tensor-parallel
  // rank (device_scores[r]: rank r's KV heads' rows on its GPU; opaque here; freed with the state, so
  // a preempted sequence's copies go with them). Sized by the GPU backend before its ranks run (they
  // only touch their own entry). Empty on the CPU.
  std::vector<std::shared_ptr<void>> device_scores;

  void host_scores() { scores.resize(static_cast<size_t>(num_layers) * num_kv_heads * prefill_len, 0.0f); }
  float* layer_scores(int layer) {
    if (scores.empty()) host_scores();
    return scores.data() + static_cast<size_t>(layer) * num_kv_heads * prefill_len;
  }
};

// For each sequence s of the batch with batch.look_m[s] set (its chunk is prefill, cache position
// == token position): accumulates this layer's scores ("full": every row; "window": the last W
// rows of the finishing chunk) and, when the chunk finishes prefill, compacts the layer's KV.
// q[T, H, D] post-RoPE. Call after this layer's attention output is computed.
// Tensor parallelism: kv_head_begin / total_kv_heads place this rank's KV heads among the model's
// (0 total: all here). The selection is per KV head (each head's scores, summed over its group's
// query heads), so a rank whose KV heads are split (not replicated: a group's query heads on one
// rank) accumulates and compacts its heads' rows of the state's [Hkv, L] scores and keeps what one
// rank keeps; the state's scores are sized before the ranks run (host_scores(),
// CpuTensorParallelDecoder); compressed_len is checked and written by the rank of KV head 0.
void run_look_m(int layer, const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                const ForwardBatch& batch, float scale, int kv_head_begin = 0, int total_kv_heads = 0);

}  // namespace vlm
