// ForwardBatch: one decoder step's flat inputs. Several sequences share it, each contributing a
// run of consecutive tokens (a prefill chunk or one decode token); the engine's ModelRunner
// fills it from a SchedulerOutput, tests and tools from SequenceChunk lists.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/block_sparse_plan.h"
#include "kernels/sparse_prefill/sparse_prefill_config.h"
#include "model/decoder/modality.h"

namespace vlm {

struct LookMState;  // model/methods/look_m_state.h
struct SinkAnchors;         // model/methods/sink_anchors.h
struct SinkRouterCounters;  // model/methods/sink_anchors.h
struct SinkRouterConfig;    // kernels/sink_router/sink_router_config.h

// Positions and cache slots are separate: a sequence's RoPE position (logical length) can run
// ahead of its cache length once its KV has been compacted (LOOK-M).
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [T]
  std::vector<int32_t> positions;     // [T] RoPE positions
  std::vector<int32_t> slot_mapping;  // [T] cache slot written for each token
  std::vector<ModalityTag> modalities;  // [T] text / image / video tag of each token
  std::vector<int32_t> mrope_positions;  // [T, 3] (t, h, w) M-RoPE positions, or empty: 1-D
                                         // `positions` (Qwen2-VL decoders need them)
  std::vector<int32_t> cu_seqlens_q;  // [S + 1] token ranges of the sequences
  std::vector<int32_t> context_lens;  // [S] cached tokens after this step (this step's included)
  std::vector<int32_t> block_tables;  // [S, max_blocks_per_seq], -1 padded
  int max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;  // rows of the batch whose logits are returned, in order
  std::vector<uint8_t> finishes_prefill;  // [S] 1 when this step computes the sequence's last
                                          // prefill token (LOOK-M and anchors hang on it)
  std::vector<LookMState*> look_m;  // [S] or empty: LOOK-M work of each prefill chunk (null: off)
  // SinkRouter (empty: off for the whole batch). [S] the sequence's anchor store when routing is
  // on for it (anchors are captured when it finishes prefill, its decode rows are routed), else
  // null. With stores, sink_router must be set; sink_counters (optional) gains the totals.
  std::vector<SinkAnchors*> sink_anchors;
  const SinkRouterConfig* sink_router = nullptr;
  SinkRouterCounters* sink_counters = nullptr;
  // Sparse prefill: [S] each sequence's method for this step's rows, or empty when no sequence
  // uses one (the exact dense path). The ModelRunner fills it (length gate, prefill rows only).
  std::vector<SparsePrefillConfig> sparse_prefill;
  std::vector<int32_t> prompt_lens;  // [S] with sparse_prefill: prompt length in cache positions
  // [S] with sparse_prefill (or empty: all text): the modality tags of the sequence's prompt
  // (cache position i <-> tag i; positions past the span count as text). The boundary heads of
  // MMInference permute by them; the spans point into the sequences (valid for the step).
  std::vector<std::span<const ModalityTag>> prompt_modalities;
  // [S] with sparse_prefill (or empty): tokens per frame of each video of the sequence's prompt
  // (the grid pattern's known strides), empty spans when unknown.
  std::vector<std::span<const int32_t>> frame_strides;
  // [S] with sparse_prefill (or empty): where each sequence's sparse-prefilled chunks add their
  // plans' computed and causal key blocks (every layer); null: not counted.
  std::vector<BlockCounts*> sparse_block_counts;
  // [S] with sparse_prefill (or empty): each sequence's grid layouts kept across its chunks
  // (SparsePrefillConfig::grid_search_once); null: searched every chunk.
  std::vector<GridLayoutStore*> grid_layouts;

  // Optional probe (tools: vlm-search-patterns): called by every layer's attention after this
  // step's K/V are written and before attention runs, with q[T, H, D] post-RoPE and the scale.
  std::function<void(int layer, const float* q, int num_heads, const PagedKVLayer& kv, float scale)>
      attention_probe;

  int num_seqs() const { return static_cast<int>(context_lens.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  AttentionBatch attention_batch() const;
};

enum class LogitsFor { None, Last, All };

// One sequence's share of a step: tokens at positions [start_pos, start_pos + n) of the
// sequence, whose KV goes into the blocks of block_table (cache position == RoPE position).
struct SequenceChunk {
  std::span<const int32_t> token_ids;    // [n]
  int32_t start_pos = 0;                 // tokens already in the cache
  std::span<const int32_t> block_table;  // block ids covering positions [0, start_pos + n)
  LogitsFor logits = LogitsFor::Last;
  std::span<const ModalityTag> modalities;  // [n], or empty: all text
  bool finishes_prefill = false;
};

// Flattens chunks into a ForwardBatch. Throws InternalError when a block table is too short for
// its chunk or a chunk is empty.
ForwardBatch make_forward_batch(std::span<const SequenceChunk> chunks, int block_size);

}  // namespace vlm
