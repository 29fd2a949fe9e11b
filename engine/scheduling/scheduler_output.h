// SchedulerOutput: everything one engine step does, decided by the Scheduler and read by the
// ModelRunner (which flattens it into a ForwardBatch) and by the engine's sample/postprocess.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduling/block_manager.h"
#include "engine/scheduling/sequence.h"

namespace vlm {

// One sequence's share of the step: tokens [start, start + num_tokens) of seq->token_ids, at
// RoPE positions start.. and cache slots cache_start.. (physical; == start until compaction).
// The scheduler has already advanced the sequence's computed/cached lengths past the chunk.
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t start = 0;        // logical position of the first token
  int32_t cache_start = 0;  // physical cache slot index (within the sequence) of the first token
  int32_t num_tokens = 0;
  bool is_prefill = false;        // prompt tokens, or a recompute of several tokens
  bool finishes_prefill = false;  // the chunk reaches the sequence's last known token in prefill
  bool samples = false;           // the chunk ends at the last known token: sample the next one
};

struct SchedulerOutput {
  // Decode chunks first (one token each), then prefill chunks, each in queue order.
  std::vector<ScheduledChunk> chunks;
  std::vector<BlockCopy> block_copies;  // copy-on-write copies to make before the step runs
  std::vector<Sequence*> preempted;     // sent back to waiting (KV freed) during this schedule
  int64_t num_batched_tokens = 0;
  int64_t num_prefill_tokens = 0;
  int num_decode_seqs = 0;
  int num_prefill_seqs = 0;

  bool empty() const { return chunks.empty(); }
};

}  // namespace vlm
