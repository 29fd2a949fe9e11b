// Engine test helpers: build an Engine on a fixture model, submit requests at given steps, step
// until everything is done (checking block integrity after every step), collect each request's
// events into one result.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tests/support/decoder_harness.h"

namespace vlm::testing {

// Everything one choice of a request produced.
struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  FinishReason finish = FinishReason::None;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
};

struct RequestResult {
  std::map<int, ChoiceResult> choices;
  std::optional<Usage> usage;
  std::optional<RequestFailure> error;
  bool done = false;
  int num_events = 0;
};

inline EngineConfig test_config(int block_size = 16, int64_t num_blocks = 256, int budget = 512) {
  EngineConfig c;
  c.dtype = DType::F32;  // the exact path: the fixtures' Hugging Face parity
  c.block_size = block_size;
  c.num_kv_blocks = num_blocks;
  c.kv_dtype = DType::F32;
  c.max_model_len = 512;  // the fixtures' prompts reach 150 tokens (beyond qwen2_yarn_f16's 128)
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = 64;
  c.check_integrity_every_step = true;
  return c;
}

inline std::unique_ptr<Engine> make_engine(const std::string& model, const EngineConfig& config,
                                           std::shared_ptr<const TextDecoderFactory> text = nullptr) {
  return std::make_unique<Engine>(config, LlmDecoder::load(fixture_model_dir(model)), std::move(text));
}

inline GenerationRequest greedy_request(std::string id, std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.id = std::move(id);
  r.prompt_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

// Folds events into a result; checks the stream's shape (events after done, empty token events).
inline void collect(RequestChannel& ch, RequestResult& r) {
  while (auto ev = ch.try_pop()) {
    EXPECT_FALSE(r.done) << "event after done";
    ++r.num_events;
    ChoiceResult& c = r.choices[ev->index];
    c.tokens.insert(c.tokens.end(), ev->token_ids.begin(), ev->token_ids.end());
    c.text += ev->text;
    c.logprobs.insert(c.logprobs.end(), ev->logprobs.begin(), ev->logprobs.end());
    if (ev->finish_reason != FinishReason::None) {
      EXPECT_EQ(c.finish, FinishReason::None) << "choice finished twice";
      c.finish = ev->finish_reason;
      c.stop_string = ev->stop_string;
      c.stop_token_id = ev->stop_token_id;
    }
    if (ev->usage) r.usage = ev->usage;
    if (ev->error) r.error = ev->error;
    r.done = ev->done;
  }
}

struct Submission {
  int step = 0;  // engine step before which the request is added
  GenerationRequest request;
};

// Adds each request at its step, steps until all are done; returns results by request id.
inline std::map<std::string, RequestResult> run_engine(Engine& engine, std::vector<Submission> subs,
                                                       int max_steps = 20000) {
  std::map<std::string, std::shared_ptr<RequestChannel>> channels;
  std::map<std::string, RequestResult> results;
  size_t next = 0;
  for (int step = 0; step < max_steps; ++step) {
    for (; next < subs.size() && subs[next].step <= step; ++next) {
      auto ch = std::make_shared<RequestChannel>();
      channels[subs[next].request.id] = ch;
      engine.add_request(subs[next].request, ch);
    }
    if (next == subs.size() && !engine.has_unfinished()) break;
    engine.step();
    for (auto& [id, ch] : channels) collect(*ch, results[id]);
  }
  EXPECT_FALSE(engine.has_unfinished()) << "requests left after " << max_steps << " steps";
  EXPECT_TRUE(engine.check_idle());
  EXPECT_EQ(engine.block_manager().num_used_blocks(), 0);
  return results;
}

}  // namespace vlm::testing
