// KVCompressor: the engine's side of LOOK-M. Policy: a sequence is compressed when its setting
// (the request's override, else the server default) is enabled and its prompt has an image or
// video token (or text_only_prompts allows text). Mechanism: before a step, prepare() gives each
// of those sequences' prefill chunks a LookMState (new at the first chunk, so a preempted
// sequence is compressed again after its recompute); the attention layers fill it during the
// step; after the step, apply() trims the block table of every sequence whose prefill finished
// to its compressed length, returning the tail blocks to the pool. The logical length (RoPE
// positions, usage) is untouched: only num_cached_tokens shrinks.
#pragma once

#include <cstdint>

#include "engine/scheduling/block_manager.h"
#include "engine/engine_config.h"
#include "engine/scheduling/scheduler_output.h"

namespace vlm {

class KVCompressor {
 public:
  KVCompressor(int num_layers, int num_kv_heads) : num_layers_(num_layers), num_kv_heads_(num_kv_heads) {}

  // Whether LOOK-M applies to this sequence (its resolved setting and its prompt's tags).
  static bool applies(const Sequence& seq);

  // Attaches or creates Sequence::look_m_state for each prefill chunk that LOOK-M applies to.
  void prepare(const SchedulerOutput& out) const;

  // After a successful step: trims every sequence whose prefill just finished with a LOOK-M
  // state to its compressed length (BlockManager::trim), drops the state and counts the
  // compression in `stats`. Returns the number of blocks freed.
  int64_t apply(const SchedulerOutput& out, BlockManager& blocks, EngineStats& stats) const;

 private:
  int num_layers_;
  int num_kv_heads_;
};

}  // namespace vlm
