// Scheduler: decides each step which sequences run and how many tokens each feeds, under
// max_num_seqs and max_num_batched_tokens; executes the decision through the BlockManager and
// returns it as one SchedulerOutput. The sequences are owned by the caller (the Engine, or a
// test); the scheduler holds pointers between add() and finish()/abort().
//
// One step (schedule()):
//  1. Decodes: every running sequence with one uncomputed token, oldest first. When none runs
//     (every running sequence still prefilling, or none running) and prefill_only_batched_tokens
//     is set, the rest of the step's budget is that instead of max_num_batched_tokens: no stream
//     waits between its tokens on this step, so a long prompt may take a bigger chunk (issue 38).
//     The next step with a decode is back to max_num_batched_tokens; a request arriving during a
//     big step waits at most that one step. When a chunk at the bigger size does not find its
//     blocks free (2: it would preempt; 3: the sequence would not be admitted), the step falls
//     back to what is left of max_num_batched_tokens, so the bigger budget does not itself
//     preempt or hold back an admission where the normal chunk fits.
//  2. Prefill chunks of running sequences (chunked prefill), oldest first, up to the budget and
//     prefill_chunk_size per sequence; while sequences wait to be admitted, a chunk is also held
//     to long_prefill_token_threshold (when set), so the rest of the budget admits them this step
//     instead of after the whole long prompt (a short request beside a long video's prefill).
//  3. Waiting sequences are admitted (FCFS, preempted ones first) while budgets, max_num_seqs
//     (counting the n choices a request will fork into) and free blocks allow, unless a
//     preemption happened in this step. With prefix caching, an admitted sequence first takes
//     its cached leading blocks (BlockManager::match_prefix): they count as computed, cost no
//     budget, and its first chunk starts after them (a recompute after preemption hits too).
// Out of blocks in 1 or 2: the newest running sequence not yet scheduled in this step is
// preempted (its blocks freed, recomputed from scratch later) until the sequence fits or is
// itself the newest.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/scheduling/block_manager.h"
#include "engine/scheduling/scheduler_output.h"
#include "engine/scheduling/sequence.h"

namespace vlm {

struct SchedulerConfig {
  int max_num_seqs = 256;              // running sequences at once
  int max_num_batched_tokens = 2048;   // tokens per step (decodes + prefill chunks)
  int prefill_chunk_size = 0;          // most prompt tokens of one sequence per step; 0: budget
  int max_waiting = 1024;              // waiting sequences; add() beyond it is a 429
  // vLLM's --long-prefill-token-threshold, applied only while sequences wait: the most prompt
  // tokens of one running sequence per step then; 0: no such cap.
  int long_prefill_token_threshold = 0;
  // Tokens of a step that runs no decode (prefill chunks only: nobody's inter-token gap is the
  // step's length): 0 (default): off, every step max_num_batched_tokens; else at least
  // max_num_batched_tokens. kPrefillOnlyTokensAuto (vlm-server's default): the backend's choice,
  // resolved by the Engine before the Scheduler is built (resolve_prefill_only_batched_tokens,
  // engine_config.h: the GPU's kCudaPrefillOnlyBatchedTokens, the CPU's 0). The GPU backend
  // reserves its step activations for the larger of the two budgets.
  int prefill_only_batched_tokens = 0;
};

inline constexpr int kPrefillOnlyTokensAuto = -1;

// The most tokens any step of `c` may batch: max_num_batched_tokens, or prefill_only_batched_tokens
// when that is larger (a resolved config; auto counts as off).
inline int max_step_tokens(const SchedulerConfig& c) {
  return c.prefill_only_batched_tokens > c.max_num_batched_tokens ? c.prefill_only_batched_tokens
                                                                  : c.max_num_batched_tokens;
}

// `c` with prefill_only_batched_tokens auto replaced by the backend's value `backend_auto`
// (StepBackend::prefill_only_batched_tokens_auto), or by 0 (off) when that is not above
// max_num_batched_tokens (the rule would grow nothing); other values unchanged.
inline SchedulerConfig resolve_prefill_only(SchedulerConfig c, int backend_auto) {
  if (c.prefill_only_batched_tokens == kPrefillOnlyTokensAuto)
    c.prefill_only_batched_tokens = backend_auto > c.max_num_batched_tokens ? backend_auto : 0;
  return c;
}

// Why `c` is not a valid scheduler config ("" when it is): budgets below 1, negative caps, a
// prefill_only_batched_tokens other than 0 / auto below max_num_batched_tokens. Flag names as
// vlm-server spells them.
std::string scheduler_config_error(const SchedulerConfig& c);

class Scheduler {
 public:
  // Throws InternalError for a config scheduler_config_error refuses, or one still auto.
  Scheduler(const SchedulerConfig& config, BlockManager& blocks);

  const SchedulerConfig& config() const { return config_; }

  // Queues a new sequence (status Waiting, no blocks). Throws RequestError(429,
  // "rate_limit_exceeded") when max_waiting sequences already wait; the sequence is not queued.
  void add(Sequence* seq);
  // Whether add() would refuse a sequence now.
  bool waiting_full() const { return static_cast<int>(waiting_.size()) >= config_.max_waiting; }

  SchedulerOutput schedule();

  // A running sequence is done: frees its blocks, status Finished with `reason`.
  void finish(Sequence* seq, FinishReason reason);
  // Ends a sequence in any state (waiting, running, already finished: no-op), freeing its blocks.
  void abort(Sequence* seq, FinishReason reason = FinishReason::Abort);
  // A new running sequence sharing the parent's blocks (n > 1), placed right after the parent.
  void fork(Sequence* parent, Sequence* child);

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  BlockManager& block_manager() { return blocks_; }
  const BlockManager& block_manager() const { return blocks_; }

  // BlockManager::check_integrity over the running sequences, plus: waiting sequences hold no
  // blocks and have nothing computed; running ones are Running, waiting ones Waiting.
  void check_integrity() const;

 private:
  // Frees the newest unscheduled running sequence; false when only `keep` (or nothing) is left.
  bool preempt_newest(SchedulerOutput& out, const std::vector<uint8_t>& scheduled_ids, size_t keep_index);
  void preempt(Sequence* seq, SchedulerOutput& out);
  ScheduledChunk make_chunk(Sequence* seq, int32_t n);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order: oldest first
  int64_t num_preemptions_ = 0;
};

}  // namespace vlm
