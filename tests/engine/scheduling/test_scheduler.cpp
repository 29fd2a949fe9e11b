// The scheduler without a model. Sequences are token vectors; a fake "model" records, for every
// cache slot, which (token, position) was written there, and before each chunk checks that the
// sequence's earlier slots still hold its own tokens (no block shared by mistake, none lost in a
// preemption, recompute complete). Every step checks the budgets and check_integrity().
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "engine/request.h"
#include "engine/scheduling/scheduler.h"
#include "kernels/core/check.h"

namespace vlm {
namespace {

struct Arrival {
  int step;        // step at which the sequence is added
  int32_t prompt;  // prompt length
  int32_t output;  // output tokens to generate
};

struct Case {
  std::string name;
  int64_t num_blocks;
  int block_size;
  SchedulerConfig config;
  std::vector<Arrival> arrivals;
  bool expect_preemption;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Drives a Scheduler with fake sampling (token = f(seq id, output index)) over a fake KV cache.
class Sim {
 public:
  Sim(int64_t num_blocks, int block_size, SchedulerConfig config)
      : bm_(num_blocks, block_size), sched_(config, bm_), slots_(static_cast<size_t>(num_blocks * block_size)) {}
  ~Sim() {
    for (auto& s : seqs_) sched_.abort(s.get());
  }

  Sequence* add(int32_t prompt, int32_t output) {
    const int64_t id = static_cast<int64_t>(seqs_.size()) + 1;
    std::vector<int32_t> tokens(static_cast<size_t>(prompt));
    for (int32_t i = 0; i < prompt; ++i) tokens[i] = static_cast<int32_t>(id * 100000 + i);
    seqs_.push_back(std::make_unique<Sequence>(id, tokens, SamplingParams{}));
    targets_[id] = output;
    sched_.add(seqs_.back().get());
    return seqs_.back().get();
  }

  // One step: schedule, check, "run" (verify and write slots), "sample" (append, finish).
  SchedulerOutput step() {
    SchedulerOutput out = sched_.schedule();
    const SchedulerConfig& c = sched_.config();
    // A step with a decode keeps max_num_batched_tokens; one without may take the prefill-only budget.
    EXPECT_LE(out.num_batched_tokens, out.num_decode_seqs > 0 ? c.max_num_batched_tokens : max_step_tokens(c));
    EXPECT_LE(sched_.num_running(), c.max_num_seqs);
    bool seen_prefill = false;
    std::vector<const Sequence*> in_step;
    for (const ScheduledChunk& ch : out.chunks) {
      EXPECT_TRUE(std::find(in_step.begin(), in_step.end(), ch.seq) == in_step.end()) << "twice in one step";
      in_step.push_back(ch.seq);
      if (ch.is_prefill && c.prefill_chunk_size > 0) {
        EXPECT_LE(ch.num_tokens, c.prefill_chunk_size);
      }
      if (ch.num_tokens > 1) {
        seen_prefill = true;
      } else {
        EXPECT_FALSE(seen_prefill && !ch.is_prefill) << "decode after a prefill chunk";
      }
    }
    for (const BlockCopy& cp : out.block_copies)
      for (int i = 0; i < bm_.block_size(); ++i)
        slots_[cp.dst * bm_.block_size() + i] = slots_[cp.src * bm_.block_size() + i];
    for (const ScheduledChunk& ch : out.chunks) run_chunk(ch);
    for (const ScheduledChunk& ch : out.chunks) {
      if (!ch.samples) continue;
      Sequence* s = ch.seq;
      s->token_ids.push_back(static_cast<int32_t>(s->id * 100000 + 50000 + s->num_output_tokens()));
      if (s->num_output_tokens() >= targets_[s->id]) sched_.finish(s, FinishReason::Length);
    }
    sched_.check_integrity();
    ++num_steps_;
    return out;
  }

  Scheduler& sched() { return sched_; }
  BlockManager& bm() { return bm_; }
  const std::vector<std::unique_ptr<Sequence>>& seqs() const { return seqs_; }
  int32_t target(int64_t id) { return targets_[id]; }

 private:
  int32_t slot_of(const Sequence& s, int32_t cache_pos) const {
    return s.block_table[cache_pos / bm_.block_size()] * bm_.block_size() + cache_pos % bm_.block_size();
  }
  void run_chunk(const ScheduledChunk& ch) {
    const Sequence& s = *ch.seq;
    for (int32_t p = 0; p < ch.cache_start; ++p) {
      const auto& [tok, pos] = slots_[slot_of(s, p)];
      ASSERT_EQ(pos, p) << "sequence " << s.id << " lost its slot " << p;
      ASSERT_EQ(tok, s.token_ids[p]) << "sequence " << s.id << " slot " << p << " overwritten";
    }
    for (int32_t i = 0; i < ch.num_tokens; ++i)
      slots_[slot_of(s, ch.cache_start + i)] = {s.token_ids[ch.start + i], ch.start + i};
  }

  BlockManager bm_;
  Scheduler sched_;
  std::vector<std::pair<int32_t, int32_t>> slots_;  // (token, position) written to each slot
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::map<int64_t, int32_t> targets_;
  int num_steps_ = 0;
};

class SchedulerCases : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerCases, RunsEverySequenceToTheEndWithoutLeaks) {
  const Case& c = GetParam();
  Sim sim(c.num_blocks, c.block_size, c.config);
  size_t next = 0;
  int step = 0;
  while (next < c.arrivals.size() || sim.sched().has_unfinished()) {
    while (next < c.arrivals.size() && c.arrivals[next].step <= step) {
      sim.add(c.arrivals[next].prompt, c.arrivals[next].output);
      ++next;
    }
    sim.step();
    if (HasFatalFailure()) return;
    ASSERT_LT(++step, 10000) << "no progress";
  }
  for (const auto& s : sim.seqs()) {
    EXPECT_TRUE(s->is_finished());
    ASSERT_EQ(s->num_output_tokens(), sim.target(s->id)) << "sequence " << s->id;
    for (int32_t k = 0; k < s->num_output_tokens(); ++k)
      EXPECT_EQ(s->output_ids()[k], s->id * 100000 + 50000 + k) << "recompute changed an output";
  }
  EXPECT_EQ(sim.bm().num_used_blocks(), 0);
  if (c.expect_preemption) EXPECT_GT(sim.sched().num_preemptions(), 0);
  else EXPECT_EQ(sim.sched().num_preemptions(), 0);
}

SchedulerConfig cfg(int max_seqs, int budget, int chunk = 0, int max_waiting = 1024) {
  return SchedulerConfig{max_seqs, budget, chunk, max_waiting};
}

// cfg with the prefill-only budget (steps without decodes) set to `prefill_only`.
SchedulerConfig cfg_po(int max_seqs, int budget, int prefill_only, int chunk = 0) {
  SchedulerConfig c = cfg(max_seqs, budget, chunk);
  c.prefill_only_batched_tokens = prefill_only;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Budgets, SchedulerCases,
    ::testing::Values(
        Case{"OneShortSequence", 16, 16, cfg(8, 256), {{0, 5, 3}}, false},
        Case{"LongPromptInChunksOf64", 64, 16, cfg(8, 64), {{0, 300, 4}}, false},
        Case{"ChunkCapBelowBudget", 64, 16, cfg(8, 512, 16), {{0, 100, 2}, {0, 70, 2}}, false},
        Case{"MaxNumSeqsOfTwo", 64, 16, cfg(2, 512), {{0, 10, 8}, {0, 12, 8}, {0, 14, 8}, {0, 16, 8}}, false},
        Case{"BudgetOfOneToken", 32, 4, cfg(4, 1), {{0, 7, 3}, {0, 5, 3}}, false},
        Case{"StaggeredMixOfDecodeAndPrefill", 128, 8, cfg(16, 48),
             {{0, 40, 20}, {1, 9, 30}, {3, 100, 5}, {4, 1, 12}, {4, 33, 7}, {9, 64, 9}, {12, 2, 20}}, false},
        Case{"PreemptWhenBlocksRunOut", 12, 4, cfg(8, 64), {{0, 10, 20}, {0, 10, 20}, {0, 10, 20}}, true},
        Case{"PreemptDuringChunkedPrefill", 10, 4, cfg(8, 8), {{0, 30, 6}, {0, 12, 6}, {1, 14, 6}}, true},
        Case{"PreemptUnderBlockSizeOne", 24, 1, cfg(8, 16), {{0, 6, 12}, {0, 5, 12}, {2, 8, 9}}, true},
        Case{"ManySmallSequencesTinyCache", 16, 4, cfg(32, 32),
             {{0, 3, 9}, {0, 4, 9}, {0, 5, 9}, {0, 6, 9}, {1, 7, 9}, {1, 8, 9}, {2, 9, 9}, {2, 10, 9}}, true},
        // The prefill-only budget (steps without decodes take up to it): the same runs to the end.
        Case{"PrefillOnlyLongPrompt", 64, 16, cfg_po(8, 64, 256), {{0, 300, 4}}, false},
        Case{"PrefillOnlyUnderAChunkCap", 64, 16, cfg_po(8, 32, 128, 48), {{0, 100, 2}, {0, 70, 2}}, false},
        Case{"PrefillOnlyStaggeredMix", 128, 8, cfg_po(16, 48, 160),
             {{0, 40, 20}, {1, 9, 30}, {3, 100, 5}, {4, 1, 12}, {4, 33, 7}, {9, 64, 9}, {12, 2, 20}}, false},
        Case{"PrefillOnlyPreemptDuringChunkedPrefill", 10, 4, cfg_po(8, 8, 24),
             {{0, 30, 6}, {0, 12, 6}, {1, 14, 6}}, true},
        Case{"PrefillOnlyPreemptWhenBlocksRunOut", 12, 4, cfg_po(8, 16, 40),
             {{0, 10, 20}, {0, 10, 20}, {0, 10, 20}}, true},
        Case{"PrefillOnlyManySmallSequencesTinyCache", 16, 4, cfg_po(32, 8, 32),
             {{0, 3, 9}, {0, 4, 9}, {0, 5, 9}, {0, 6, 9}, {1, 7, 9}, {1, 8, 9}, {2, 9, 9}, {2, 10, 9}}, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(Scheduler, SplitsALongPromptIntoBudgetSizedChunks) {
  Sim sim(64, 16, cfg(8, 64));
  Sequence* s = sim.add(150, 1);
  std::vector<int32_t> sizes;
  std::vector<bool> samples;
  while (sim.sched().has_unfinished())
    for (const ScheduledChunk& c : sim.step().chunks) {
      sizes.push_back(c.num_tokens);
      samples.push_back(c.samples);
      EXPECT_EQ(c.finishes_prefill, c.samples);
    }
  EXPECT_EQ(sizes, (std::vector<int32_t>{64, 64, 22}));
  EXPECT_EQ(samples, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(s->num_output_tokens(), 1);
}

TEST(Scheduler, LongPrefillThresholdAdmitsWaitingPromptsBesideALongOne) {
  // Budget 64, threshold 48: alone, the long prompt takes whole budgets; once a short prompt waits,
  // the long one's chunk is held to 48 and the short one is admitted in the same step.
  SchedulerConfig c = cfg(8, 64);
  c.long_prefill_token_threshold = 48;
  Sim sim(64, 16, c);
  Sequence* a = sim.add(300, 1);
  const SchedulerOutput first = sim.step();
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].num_tokens, 64);  // nobody waits: the whole budget
  Sequence* b = sim.add(10, 2);
  const SchedulerOutput both = sim.step();
  ASSERT_EQ(both.chunks.size(), 2u);
  EXPECT_EQ(both.chunks[0].seq, a);
  EXPECT_EQ(both.chunks[0].num_tokens, 48);
  EXPECT_EQ(both.chunks[1].seq, b);
  EXPECT_EQ(both.chunks[1].num_tokens, 10);
  EXPECT_TRUE(both.chunks[1].samples);
  // Nobody waits again: b decodes (1 token) and a takes the rest of the budget.
  const SchedulerOutput next = sim.step();
  ASSERT_EQ(next.chunks.size(), 2u);
  EXPECT_EQ(next.chunks[0].seq, b);
  EXPECT_EQ(next.chunks[1].seq, a);
  EXPECT_EQ(next.chunks[1].num_tokens, 63);
}

// The prefill-only budget (issue 38): a step without decodes batches up to it; a step with one,
// max_num_batched_tokens.
TEST(Scheduler, PrefillOnlyBudgetGrowsTheChunksOfAPromptAlone) {
  Sim sim(64, 16, cfg_po(8, 64, 160));
  Sequence* s = sim.add(400, 3);
  std::vector<int32_t> sizes;
  while (s->num_output_tokens() == 0) {
    const SchedulerOutput out = sim.step();
    ASSERT_EQ(out.chunks.size(), 1u);
    EXPECT_EQ(out.num_decode_seqs, 0);
    sizes.push_back(out.chunks[0].num_tokens);
  }
  EXPECT_EQ(sizes, (std::vector<int32_t>{160, 160, 80}));
  // Its decodes: one token a step.
  EXPECT_EQ(sim.step().num_batched_tokens, 1);
}

TEST(Scheduler, PrefillOnlyBudgetFallsBackWhileADecodeRuns) {
  Sim sim(64, 16, cfg_po(8, 32, 128));
  Sequence* a = sim.add(10, 4);  // decodes steps 2-4 (its first token comes with the prompt)
  EXPECT_EQ(sim.step().chunks[0].num_tokens, 10);
  Sequence* b = sim.add(300, 1);
  for (int k = 0; k < 3; ++k) {  // a decodes: the normal budget, b's chunk its rest
    const SchedulerOutput out = sim.step();
    ASSERT_EQ(out.chunks.size(), 2u);
    EXPECT_EQ(out.chunks[0].seq, a);
    EXPECT_FALSE(out.chunks[0].is_prefill);
    EXPECT_EQ(out.chunks[1].seq, b);
    EXPECT_EQ(out.chunks[1].num_tokens, 31);
    EXPECT_EQ(out.num_batched_tokens, 32);
  }
  ASSERT_TRUE(a->is_finished());
  // a is done: nobody decodes, b takes the prefill-only budget (300 - 93 = 207 left).
  EXPECT_EQ(sim.step().chunks[0].num_tokens, 128);
  const SchedulerOutput last = sim.step();
  EXPECT_EQ(last.chunks[0].num_tokens, 79);
  EXPECT_TRUE(last.chunks[0].samples);
  EXPECT_TRUE(b->is_finished());
}

TEST(Scheduler, PrefillOnlyBudgetAdmitsWaitingPromptsUnderTheThreshold) {
  // Budget 64, prefill-only 160, threshold 48: a short prompt arriving while a long one prefills
  // alone waits one (big) step at most; then both share a step without decodes (the long one held
  // to 48, the short one admitted whole); the next step has the short one's decode: budget 64.
  SchedulerConfig c = cfg_po(8, 64, 160);
  c.long_prefill_token_threshold = 48;
  Sim sim(64, 16, c);
  Sequence* a = sim.add(600, 1);
  EXPECT_EQ(sim.step().chunks[0].num_tokens, 160);
  Sequence* b = sim.add(30, 3);
  const SchedulerOutput both = sim.step();
  ASSERT_EQ(both.chunks.size(), 2u);
  EXPECT_EQ(both.chunks[0].seq, a);
  EXPECT_EQ(both.chunks[0].num_tokens, 48);
  EXPECT_EQ(both.chunks[1].seq, b);
  EXPECT_EQ(both.chunks[1].num_tokens, 30);
  const SchedulerOutput next = sim.step();
  ASSERT_EQ(next.chunks.size(), 2u);
  EXPECT_EQ(next.chunks[0].seq, b);
  EXPECT_EQ(next.chunks[1].num_tokens, 63);
}

TEST(Scheduler, PrefillOnlyBudgetAppliesToAdmission) {
  // Nothing runs: a new prompt's first chunk takes the prefill-only budget, a second prompt the rest.
  Sim sim(128, 16, cfg_po(8, 64, 200));
  sim.add(150, 2);
  sim.add(90, 2);
  const SchedulerOutput out = sim.step();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].num_tokens, 150);
  EXPECT_EQ(out.chunks[1].num_tokens, 50);
  EXPECT_EQ(out.num_batched_tokens, 200);
}

TEST(Scheduler, PrefillOnlyBudgetFallsBackWhenItsBlocksAreNotFree) {
  // 8 blocks of 16; budget 16, prefill-only 64, threshold 8. Step 1: a's first 64 tokens (4 blocks).
  // Step 2 (b waits: a held to 8, 5 blocks): b's 56 would need 4 of the 3 free blocks, so the step
  // falls back to the normal budget's 8 left and b is admitted with 8 (1 block), not refused.
  // Step 3: a's 48 would need 3 of the 2 free, so its chunk is the normal 16 (no preemption of b).
  SchedulerConfig c = cfg_po(8, 16, 64);
  c.long_prefill_token_threshold = 8;
  Sim sim(8, 16, c);
  Sequence* a = sim.add(120, 1);
  Sequence* b = sim.add(60, 1);
  EXPECT_EQ(sim.step().chunks[0].num_tokens, 64);
  const SchedulerOutput two = sim.step();
  ASSERT_EQ(two.chunks.size(), 2u);
  EXPECT_EQ(two.chunks[0].seq, a);
  EXPECT_EQ(two.chunks[0].num_tokens, 8);
  EXPECT_EQ(two.chunks[1].seq, b);
  EXPECT_EQ(two.chunks[1].num_tokens, 8);
  const SchedulerOutput three = sim.step();
  ASSERT_EQ(three.chunks.size(), 1u);
  EXPECT_EQ(three.chunks[0].seq, a);
  EXPECT_EQ(three.chunks[0].num_tokens, 16);
  EXPECT_EQ(sim.sched().num_preemptions(), 0);
  while (sim.sched().has_unfinished()) sim.step();
  EXPECT_TRUE(a->is_finished());
  EXPECT_TRUE(b->is_finished());
  EXPECT_EQ(sim.bm().num_used_blocks(), 0);
}

TEST(Scheduler, PrefillOnlyConfigIsValidatedAndResolved) {
  EXPECT_EQ(scheduler_config_error(cfg_po(8, 2048, 0)), "");
  EXPECT_EQ(scheduler_config_error(cfg_po(8, 2048, kPrefillOnlyTokensAuto)), "");
  EXPECT_EQ(scheduler_config_error(cfg_po(8, 2048, 2048)), "");
  EXPECT_EQ(scheduler_config_error(cfg_po(8, 2048, 8192)), "");
  const std::string low = scheduler_config_error(cfg_po(8, 2048, 1024));
  EXPECT_NE(low.find("--prefill-only-batched-tokens 1024"), std::string::npos) << low;
  EXPECT_NE(low.find("2048"), std::string::npos) << low;
  EXPECT_NE(scheduler_config_error(cfg_po(8, 2048, -5)), "");
  BlockManager bm(16, 16);
  EXPECT_THROW(Scheduler(cfg_po(8, 64, 32), bm), InternalError);
  EXPECT_THROW(Scheduler(cfg_po(8, 64, kPrefillOnlyTokensAuto), bm), InternalError);  // unresolved
  // auto -> the backend's value, or off when that is not above the budget.
  EXPECT_EQ(resolve_prefill_only(cfg_po(8, 2048, kPrefillOnlyTokensAuto), 8192).prefill_only_batched_tokens, 8192);
  EXPECT_EQ(resolve_prefill_only(cfg_po(8, 8192, kPrefillOnlyTokensAuto), 8192).prefill_only_batched_tokens, 0);
  EXPECT_EQ(resolve_prefill_only(cfg_po(8, 2048, kPrefillOnlyTokensAuto), 0).prefill_only_batched_tokens, 0);
  EXPECT_EQ(resolve_prefill_only(cfg_po(8, 2048, 4096), 8192).prefill_only_batched_tokens, 4096);
  EXPECT_EQ(max_step_tokens(cfg_po(8, 2048, 0)), 2048);
  EXPECT_EQ(max_step_tokens(cfg_po(8, 2048, 4096)), 4096);
}

TEST(Scheduler, WithoutTheThresholdAWaitingPromptWaitsForTheLongOne) {
  Sim sim(64, 16, cfg(8, 64));
  sim.add(300, 1);
  sim.step();
  sim.add(10, 2);
  const SchedulerOutput out = sim.step();
  ASSERT_EQ(out.chunks.size(), 1u);  // the long prompt's chunk takes the whole budget
  EXPECT_EQ(out.chunks[0].num_tokens, 64);
}

TEST(Scheduler, DecodesGoFirstAndPrefillFillsTheRestOfTheBudget) {
  Sim sim(64, 16, cfg(8, 32));
  Sequence* a = sim.add(10, 50);
  sim.step();  // a's prompt
  Sequence* b = sim.add(100, 2);
  const SchedulerOutput out = sim.step();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq, a);
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_FALSE(out.chunks[0].is_prefill);
  EXPECT_EQ(out.chunks[1].seq, b);
  EXPECT_EQ(out.chunks[1].num_tokens, 31);
  EXPECT_TRUE(out.chunks[1].is_prefill);
  EXPECT_FALSE(out.chunks[1].samples);
  EXPECT_EQ(out.num_decode_seqs, 1);
  EXPECT_EQ(out.num_prefill_seqs, 1);
  EXPECT_EQ(out.num_prefill_tokens, 31);
  // Next step: a decodes again, b continues its prompt.
  const SchedulerOutput next = sim.step();
  ASSERT_EQ(next.chunks.size(), 2u);
  EXPECT_EQ(next.chunks[0].seq, a);
  EXPECT_EQ(next.chunks[1].seq, b);
  EXPECT_EQ(next.chunks[1].start, 31);
}

TEST(Scheduler, PreemptsTheNewestAndResumesItByRecompute) {
  // 6 blocks of 4: three 8-token prompts fill 6 blocks; the first decode needs a seventh.
  Sim sim(6, 4, cfg(8, 64));
  Sequence* a = sim.add(8, 4);
  Sequence* b = sim.add(8, 4);
  Sequence* c = sim.add(8, 4);
  sim.step();
  ASSERT_EQ(sim.bm().num_free_blocks(), 0);
  const SchedulerOutput out = sim.step();
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], c) << "the newest goes first";
  EXPECT_EQ(c->status, SequenceStatus::Waiting);
  EXPECT_EQ(c->num_computed_tokens, 0);
  EXPECT_TRUE(c->block_table.empty());
  EXPECT_EQ(c->num_output_tokens(), 1) << "outputs survive a preemption";
  EXPECT_EQ(sim.sched().waiting().front(), c);
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq, a);
  EXPECT_EQ(out.chunks[1].seq, b);
  while (sim.sched().has_unfinished()) sim.step();
  EXPECT_EQ(c->num_preemptions, 1);
  EXPECT_EQ(c->num_output_tokens(), 4);
  EXPECT_EQ(sim.bm().num_used_blocks(), 0);
}

TEST(Scheduler, NoAdmissionInAStepThatPreempted) {
  Sim sim(6, 4, cfg(8, 64));
  sim.add(8, 4);
  sim.add(8, 4);
  sim.add(8, 4);
  sim.step();
  Sequence* d = sim.add(1, 1);
  const SchedulerOutput out = sim.step();
  ASSERT_EQ(out.preempted.size(), 1u);
  for (const ScheduledChunk& c : out.chunks) EXPECT_NE(c.seq, d);
}

// Aborts at each point of a sequence's life; the blocks come back and integrity holds.
TEST(Scheduler, AbortInEveryState) {
  for (const std::string state : {"waiting", "prefill", "decode", "preempted", "finished"}) {
    SCOPED_TRACE(state);
    Sim sim(6, 4, cfg(8, 8));
    Sequence* a = sim.add(8, 8);
    Sequence* b = sim.add(8, 8);
    Sequence* c = sim.add(8, 8);
    Sequence* victim = nullptr;
    if (state == "waiting") {
      victim = c;
    } else if (state == "prefill") {
      sim.step();  // budget 8: a's prompt only
      sim.step();  // a decodes, b's prompt ... (7 of 8 tokens)
      ASSERT_EQ(b->status, SequenceStatus::Running);
      ASSERT_LT(b->num_computed_tokens, b->num_prompt_tokens);
      victim = b;
    } else if (state == "decode") {
      sim.step();
      sim.step();
      ASSERT_EQ(a->num_uncomputed_tokens(), 1);
      victim = a;
    } else if (state == "preempted") {
      for (int i = 0; i < 20 && sim.sched().num_preemptions() == 0; ++i) sim.step();
      ASSERT_GT(sim.sched().num_preemptions(), 0);
      victim = sim.sched().waiting().front();
      ASSERT_GT(victim->num_output_tokens(), 0);
    } else {
      while (!a->is_finished()) sim.step();
      victim = a;
    }
    const int64_t used_before = sim.bm().num_used_blocks();
    const auto held = static_cast<int64_t>(victim->block_table.size());
    sim.sched().abort(victim);
    EXPECT_TRUE(victim->is_finished());
    EXPECT_TRUE(victim->block_table.empty());
    EXPECT_EQ(sim.bm().num_used_blocks(), used_before - held);
    sim.sched().check_integrity();
    while (sim.sched().has_unfinished()) sim.step();
    for (Sequence* s : {a, b, c})
      if (s != victim) {
        EXPECT_EQ(s->num_output_tokens(), 8);
      }
    EXPECT_EQ(sim.bm().num_used_blocks(), 0);
  }
}

TEST(Scheduler, BoundedWaitingQueueRejectsWith429) {
  Sim sim(16, 4, cfg(8, 64, 0, 2));
  sim.add(4, 1);
  sim.add(4, 1);
  EXPECT_TRUE(sim.sched().waiting_full());
  try {
    sim.add(4, 1);
    FAIL() << "no rejection";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 429);
    EXPECT_EQ(e.type(), "rate_limit_exceeded");
  }
  EXPECT_EQ(sim.sched().num_waiting(), 2);
  while (sim.sched().has_unfinished()) sim.step();
}

TEST(Scheduler, ForkedChoicesShareThePromptAndCopyOnWrite) {
  Sim sim(16, 4, cfg(8, 64));
  Sequence* p = sim.add(6, 3);
  p->num_forks_pending = 1;
  const SchedulerOutput first = sim.sched().schedule();  // prefill of 6 tokens
  ASSERT_TRUE(first.chunks[0].samples);
  Sequence child(99, std::vector<int32_t>(p->token_ids), SamplingParams{});
  child.group_id = p->group_id;
  child.index = 1;
  sim.sched().fork(p, &child);
  EXPECT_EQ(sim.sched().running()[1], &child);
  EXPECT_EQ(child.block_table, p->block_table);
  p->token_ids.push_back(1);
  child.token_ids.push_back(2);
  const SchedulerOutput second = sim.sched().schedule();
  ASSERT_EQ(second.block_copies.size(), 1u) << "one of the two writes into the shared half-full block";
  EXPECT_NE(child.block_table[1], p->block_table[1]);
  EXPECT_EQ(child.block_table[0], p->block_table[0]);
  sim.sched().check_integrity();
  sim.sched().abort(&child);
}

TEST(MaxModelLen, PromptPlusMaxTokensMustFit) {
  EXPECT_EQ(resolve_max_tokens(10, std::nullopt, 100), 90);
  EXPECT_EQ(resolve_max_tokens(10, 90, 100), 90);
  try {
    resolve_max_tokens(10, 91, 100);
    FAIL();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "max_tokens");
    EXPECT_STREQ(e.what(),
                 "This model's maximum context length is 100 tokens. However, you requested 101 tokens (10 in "
                 "the messages, 91 in the completion). Please reduce the length of the messages or completion.");
  }
  EXPECT_THROW(resolve_max_tokens(100, std::nullopt, 100), RequestError);
}

}  // namespace
}  // namespace vlm
