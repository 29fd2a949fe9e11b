#include "engine/scheduling/scheduler.h"

#include <algorithm>
#include <climits>
#include <unordered_set>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

std::string scheduler_config_error(const SchedulerConfig& c) {
  if (c.max_num_seqs < 1) return fmt::format("--max-num-seqs {}: at least 1", c.max_num_seqs);
  if (c.max_num_batched_tokens < 1)
    return fmt::format("--max-num-batched-tokens {}: at least 1", c.max_num_batched_tokens);
  if (c.prefill_chunk_size < 0) return fmt::format("prefill chunk size {}: 0 (off) or positive", c.prefill_chunk_size);
  if (c.long_prefill_token_threshold < 0)
    return fmt::format("--long-prefill-token-threshold {}: 0 (off) or positive", c.long_prefill_token_threshold);
  if (c.max_waiting < 0) return fmt::format("--max-waiting {}: at least 0", c.max_waiting);
  const int p = c.prefill_only_batched_tokens;
  if (p != 0 && p != kPrefillOnlyTokensAuto && p < c.max_num_batched_tokens)
    return fmt::format("--prefill-only-batched-tokens {}: 0 (off), auto, or at least --max-num-batched-tokens ({})",
                       p, c.max_num_batched_tokens);
  return {};
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  const std::string why = scheduler_config_error(config);
  VLM_CHECK(why.empty(), "scheduler config: {}", why);
  VLM_CHECK(config.prefill_only_batched_tokens != kPrefillOnlyTokensAuto,
            "scheduler config: prefill_only_batched_tokens auto was not resolved (Engine does)");
}

void Scheduler::add(Sequence* seq) {
  VLM_CHECK(seq->status == SequenceStatus::Waiting && seq->block_table.empty() && seq->num_computed_tokens == 0,
            "add: sequence {} is not fresh", seq->id);
  if (waiting_full())
    throw RequestError(429, "rate_limit_exceeded",
                       fmt::format("The server is busy: {} requests are already waiting. Retry later.",
                                   waiting_.size()));
  waiting_.push_back(seq);
}

ScheduledChunk Scheduler::make_chunk(Sequence* seq, int32_t n) {
  ScheduledChunk c;
  c.seq = seq;
  c.start = seq->num_computed_tokens;
  c.cache_start = seq->num_cached_tokens;
  c.num_tokens = n;
  c.is_prefill = seq->chunk_is_prefill(n);
  seq->num_computed_tokens += n;
  seq->num_cached_tokens += n;
  c.samples = seq->num_computed_tokens == seq->num_tokens();
  c.finishes_prefill = c.is_prefill && c.samples;
  return c;
}

void Scheduler::preempt(Sequence* seq, SchedulerOutput& out) {
  blocks_.free(*seq);
  seq->num_computed_tokens = 0;
  seq->num_cached_tokens = 0;
  seq->status = SequenceStatus::Waiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  waiting_.push_front(seq);
  out.preempted.push_back(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  const int64_t chunk_cap = config_.prefill_chunk_size > 0 ? config_.prefill_chunk_size : INT_MAX;
  std::unordered_set<const Sequence*> scheduled;

  // Makes room for n slots of `seq` by preempting the newest unscheduled running sequences;
  // false when `seq` itself had to go.
  auto make_room = [&](Sequence* seq, int32_t n) {
    while (!blocks_.can_append(*seq, n)) {
      auto victim = std::find_if(running_.rbegin(), running_.rend(),
                                 [&](const Sequence* s) { return !scheduled.count(s); });
      VLM_CHECK(victim != running_.rend(), "no preemption victim for sequence {}", seq->id);
      Sequence* v = *victim;
      preempt(v, out);
      if (v == seq) return false;
    }
    return true;
  };
  auto run_chunk = [&](Sequence* seq, int32_t n) {
    blocks_.append_slots(*seq, n, out.block_copies);
    out.chunks.push_back(make_chunk(seq, n));
    scheduled.insert(seq);
    budget -= n;
  };

  // 1. Decodes (one uncomputed token), oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    if (seq->num_uncomputed_tokens() != 1) { ++i; continue; }
    if (!make_room(seq, 1)) continue;  // seq was preempted: running_[i] is the next one
    run_chunk(seq, 1);
    ++i;
  }
  // A step without decodes: the prefill-only budget (a bigger chunk; nobody waits for a token).
  // A chunk it makes bigger must not cost what the normal budget would not: when its blocks are
  // not free (it would preempt, or not be admitted), the step falls back to the normal budget.
  bool big = out.chunks.empty() && config_.prefill_only_batched_tokens > config_.max_num_batched_tokens;
  if (big) budget = config_.prefill_only_batched_tokens;
  auto fall_back = [&] {  // what is left of max_num_batched_tokens after this step's chunks so far
    budget = config_.max_num_batched_tokens - (config_.prefill_only_batched_tokens - budget);
    big = false;
  };
  // 2. Prefill chunks of running sequences (held to the threshold while others wait).
  const int64_t running_cap = !waiting_.empty() && config_.long_prefill_token_threshold > 0
                                  ? std::min<int64_t>(chunk_cap, config_.long_prefill_token_threshold)
                                  : chunk_cap;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    if (scheduled.count(seq) || seq->num_uncomputed_tokens() <= 1) { ++i; continue; }
    auto n = static_cast<int32_t>(std::min<int64_t>({seq->num_uncomputed_tokens(), budget, running_cap}));
    if (big && !blocks_.can_append(*seq, n)) {
      fall_back();
      if (budget <= 0) break;
      n = static_cast<int32_t>(std::min<int64_t>({seq->num_uncomputed_tokens(), budget, running_cap}));
    }
    if (!make_room(seq, n)) continue;
    run_chunk(seq, n);
    ++i;
  }
  // 3. Admission, unless this step had to preempt.
  while (out.preempted.empty() && !waiting_.empty() && budget > 0) {
    Sequence* seq = waiting_.front();
    if (static_cast<int>(running_.size()) + 1 + seq->num_forks_pending > config_.max_num_seqs) break;
    // Prefix caching: the cached leading blocks count as computed; only the rest is prefilled.
    const int32_t hits = blocks_.match_prefix(*seq);
    const int64_t todo = seq->num_tokens() - static_cast<int64_t>(hits) * blocks_.block_size();
    auto n = static_cast<int32_t>(std::min<int64_t>({todo, budget, chunk_cap}));
    if (big && !blocks_.can_allocate(*seq, n, hits)) {
      fall_back();
      if (budget <= 0) break;
      n = static_cast<int32_t>(std::min<int64_t>({todo, budget, chunk_cap}));
    }
    if (!blocks_.can_allocate(*seq, n, hits)) break;
    blocks_.allocate(*seq, n, hits);
    if (seq->num_prefix_cached_tokens < 0) seq->num_prefix_cached_tokens = seq->num_computed_tokens;
    waiting_.pop_front();
    seq->status = SequenceStatus::Running;
    running_.push_back(seq);
    out.chunks.push_back(make_chunk(seq, n));
    scheduled.insert(seq);
    budget -= n;
  }

  for (const ScheduledChunk& c : out.chunks) {
    out.num_batched_tokens += c.num_tokens;
    if (c.is_prefill) {
      out.num_prefill_tokens += c.num_tokens;
      ++out.num_prefill_seqs;
    } else {
      ++out.num_decode_seqs;
    }
  }
  return out;
}

void Scheduler::finish(Sequence* seq, FinishReason reason) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  VLM_CHECK(it != running_.end(), "finish: sequence {} is not running", seq->id);
  running_.erase(it);
  blocks_.free(*seq);
  seq->status = SequenceStatus::Finished;
  seq->finish_reason = reason;
}

void Scheduler::abort(Sequence* seq, FinishReason reason) {
  if (seq->status == SequenceStatus::Finished) return;
  if (seq->status == SequenceStatus::Waiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
  } else {
    auto it = std::find(running_.begin(), running_.end(), seq);
    VLM_CHECK(it != running_.end(), "abort: running sequence {} is not in the running queue", seq->id);
    running_.erase(it);
  }
  blocks_.free(*seq);
  seq->status = SequenceStatus::Finished;
  seq->finish_reason = reason;
}

void Scheduler::fork(Sequence* parent, Sequence* child) {
  VLM_CHECK(parent->status == SequenceStatus::Running, "fork: parent {} is not running", parent->id);
  VLM_CHECK(parent->num_forks_pending > 0, "fork: parent {} has no fork pending", parent->id);
  VLM_CHECK(child->group_id == parent->group_id, "fork: child {} of group {}, parent of group {}", child->id,
            child->group_id, parent->group_id);
  auto it = std::find(running_.begin(), running_.end(), parent);
  VLM_CHECK(it != running_.end(), "fork: parent {} is not in the running queue", parent->id);
  blocks_.fork(*parent, *child);
  child->num_computed_tokens = parent->num_computed_tokens;
  child->status = SequenceStatus::Running;
  child->num_forks_pending = 0;
  --parent->num_forks_pending;
  // After the parent and its earlier children: choices keep their order.
  auto pos = it + 1;
  while (pos != running_.end() && (*pos)->group_id == parent->group_id) ++pos;
  running_.insert(pos, child);
}

void Scheduler::check_integrity() const {
  std::vector<const Sequence*> live(running_.begin(), running_.end());
  for (const Sequence* s : running_)
    VLM_CHECK(s->status == SequenceStatus::Running, "running sequence {} has status {}", s->id,
              static_cast<int>(s->status));
  for (const Sequence* s : waiting_) {
    VLM_CHECK(s->status == SequenceStatus::Waiting, "waiting sequence {} has status {}", s->id,
              static_cast<int>(s->status));
    VLM_CHECK(s->block_table.empty() && s->num_computed_tokens == 0 && s->num_cached_tokens == 0,
              "waiting sequence {} holds {} blocks, {} computed", s->id, s->block_table.size(),
              s->num_computed_tokens);
  }
  std::unordered_set<const Sequence*> seen;
  for (const Sequence* s : live) VLM_CHECK(seen.insert(s).second, "sequence {} is running twice", s->id);
  for (const Sequence* s : waiting_) VLM_CHECK(seen.insert(s).second, "sequence {} is queued twice", s->id);
  blocks_.check_integrity(live);
}

}  // namespace vlm
