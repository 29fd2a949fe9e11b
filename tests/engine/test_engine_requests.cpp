// One request's life through the engine on a fixture model: stop tokens, EOS, stop strings over
// token boundaries, max_tokens, logprobs, usage, a request that fails mid-way while others go
// on, aborts in every state, and the requests refused up front.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_text_decoder.h"

namespace vlm::testing {
namespace {

const std::string kModel = "qwen2_tiny";

std::string piece(int32_t id) { return "<" + std::to_string(id) + ">"; }

std::string text_of(const std::vector<int32_t>& ids, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += piece(ids[i]);
  return s;
}

// The first index whose token did not occur before it (so stopping on it stops there).
size_t first_fresh(const std::vector<int32_t>& ids, size_t from) {
  for (size_t k = from; k < ids.size(); ++k)
    if (std::find(ids.begin(), ids.begin() + static_cast<int64_t>(k), ids[k]) == ids.begin() + static_cast<int64_t>(k)) return k;
  ADD_FAILURE() << "no fresh token";
  return 0;
}

class EngineRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = load_reference(kModel);
    prompt_ = ref_.ids(2);
    want_ = ref_.greedy(2);
    engine_ = make_engine(kModel, test_config(), std::make_shared<FakeTextDecoderFactory>(std::map<int32_t, std::string>{}));
  }
  RequestResult run_one(const GenerationRequest& r) { return run_engine(*engine_, {{0, r}}).at(r.id); }

  Reference ref_;
  std::vector<int32_t> prompt_, want_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineRequests, MaxTokensEndsWithLengthAndCountsUsage) {
  const RequestResult r = run_one(greedy_request("a", prompt_, 5));
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.choices.at(0).tokens, std::vector<int32_t>(want_.begin(), want_.begin() + 5));
  EXPECT_EQ(r.choices.at(0).finish, FinishReason::Length);
  EXPECT_EQ(r.choices.at(0).text, text_of(want_, 5));
  ASSERT_TRUE(r.usage);
  EXPECT_EQ(r.usage->prompt_tokens, static_cast<int64_t>(prompt_.size()));
  EXPECT_EQ(r.usage->completion_tokens, 5);
  EXPECT_EQ(r.num_events, 5) << "one event per token";
}

TEST_F(EngineRequests, StopTokenEndsTheChoiceAndItsTextIsLeftOut) {
  const size_t k = first_fresh(want_, 3);
  GenerationRequest req = greedy_request("a", prompt_, 20);
  req.params.stop_token_ids = {want_[k]};
  const RequestResult r = run_one(req);
  const ChoiceResult& c = r.choices.at(0);
  EXPECT_EQ(c.tokens, std::vector<int32_t>(want_.begin(), want_.begin() + static_cast<int64_t>(k) + 1));
  EXPECT_EQ(c.finish, FinishReason::Stop);
  EXPECT_EQ(c.stop_token_id, want_[k]);
  EXPECT_EQ(c.text, text_of(want_, k));
}

TEST_F(EngineRequests, StopStringAcrossTokensEndsTheText) {
  // The stop string starts inside token 3's text and ends inside token 4's.
  const std::string t3 = piece(want_[3]), t4 = piece(want_[4]);
  GenerationRequest req = greedy_request("a", prompt_, 20);
  req.params.stop = {t3.substr(1) + t4.substr(0, 2)};
  const RequestResult r = run_one(req);
  const ChoiceResult& c = r.choices.at(0);
  ASSERT_EQ(c.finish, FinishReason::Stop);
  ASSERT_TRUE(c.stop_string);
  EXPECT_EQ(*c.stop_string, req.params.stop[0]);
  EXPECT_EQ(c.tokens.size(), 5u) << "the token that completed the stop string is the last";
  EXPECT_EQ(c.text, text_of(want_, 3) + "<");
}

TEST_F(EngineRequests, EosStopsUnlessIgnoredAndNotBeforeMinTokens) {
  // A copy of the fixture whose EOS is a token the greedy continuation produces.
  const size_t k = first_fresh(want_, 4);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "vlm_engine_eos_fixture";
  std::filesystem::remove_all(dir);
  std::filesystem::copy(fixture_model_dir(kModel), dir);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["eos_token_id"] = want_[k];
  std::ofstream(dir / "config.json") << cfg.dump();
  EngineConfig c = test_config();
  Engine engine(c, LlmDecoder::load(dir.string()), std::make_shared<FakeTextDecoderFactory>(std::map<int32_t, std::string>{}));
  GenerationRequest req = greedy_request("a", prompt_, 20);
  req.params.ignore_eos = false;
  RequestResult r = run_engine(engine, {{0, req}}).at("a");
  EXPECT_EQ(r.choices.at(0).tokens.size(), k + 1);
  EXPECT_EQ(r.choices.at(0).finish, FinishReason::Stop);
  EXPECT_FALSE(r.choices.at(0).stop_token_id) << "EOS is not reported as a stop token id";
  EXPECT_EQ(r.choices.at(0).text, text_of(want_, k));
  req.params.ignore_eos = true;
  r = run_engine(engine, {{0, req}}).at("a");
  EXPECT_EQ(r.choices.at(0).tokens.size(), 20u);
  req.params.ignore_eos = false;
  req.params.min_tokens = static_cast<int>(k) + 2;  // EOS masked while it would have been picked
  r = run_engine(engine, {{0, req}}).at("a");
  EXPECT_GE(r.choices.at(0).tokens.size(), k + 2);
  EXPECT_NE(r.choices.at(0).tokens[k], want_[k]);
  std::filesystem::remove_all(dir);
}

TEST_F(EngineRequests, LogprobsOfTheFirstTokenMatchHuggingFace) {
  GenerationRequest req = greedy_request("a", prompt_, 3);
  req.params.logprobs = 3;
  const RequestResult r = run_one(req);
  const auto& lps = r.choices.at(0).logprobs;
  ASSERT_EQ(lps.size(), 3u);
  const TensorView hf = ref_.logits(2);
  const int64_t V = hf.dim(1);
  const float* last = hf.as<const float>() + (hf.dim(0) - 1) * V;
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += std::exp(static_cast<double>(last[i]));
  EXPECT_EQ(lps[0].token_id, want_[0]);
  EXPECT_NEAR(lps[0].logprob, last[want_[0]] - std::log(z), 1e-4);
  EXPECT_EQ(lps[0].rank, 1);
  ASSERT_EQ(lps[0].top.size(), 3u);
  EXPECT_EQ(lps[0].top[0].token_id, want_[0]);
  EXPECT_GE(lps[0].top[0].logprob, lps[0].top[1].logprob);
  EXPECT_GE(lps[0].top[1].logprob, lps[0].top[2].logprob);
}

TEST_F(EngineRequests, AFailingRequestEndsWithAnErrorAndTheOthersGoOn) {
  // The fake decoder throws on a token only request "bad" produces.
  const std::vector<int32_t> other_prompt = ref_.ids(3), other_want = ref_.greedy(3);
  int32_t poison = -1;
  for (int32_t t : want_)
    if (std::find(other_want.begin(), other_want.end(), t) == other_want.end()) {
      poison = t;
      break;
    }
  ASSERT_GE(poison, 0);
  Engine engine(test_config(), LlmDecoder::load(fixture_model_dir(kModel)),
                std::make_shared<FakeTextDecoderFactory>(std::map<int32_t, std::string>{}, poison));
  auto results = run_engine(engine, {{0, greedy_request("bad", prompt_, static_cast<int>(want_.size()))},
                                     {0, greedy_request("good", other_prompt, static_cast<int>(other_want.size()))}});
  const RequestResult& bad = results.at("bad");
  ASSERT_TRUE(bad.error);
  EXPECT_EQ(bad.error->status, 500);
  EXPECT_NE(bad.error->message.find("cannot decode token " + std::to_string(poison)), std::string::npos);
  EXPECT_TRUE(bad.done);
  EXPECT_EQ(results.at("good").choices.at(0).tokens, other_want);
  EXPECT_EQ(engine.stats().num_requests_finished[static_cast<int>(FinishReason::Error)], 1);
}

// Aborts by dropping the reader (cancel) or by id, while waiting, in prefill and in decode.
TEST_F(EngineRequests, AbortInEveryState) {
  EngineConfig c = test_config(16, 256, 32);
  c.scheduler.max_num_seqs = 2;
  Engine engine(c, LlmDecoder::load(fixture_model_dir(kModel)));
  auto add = [&](const std::string& id, int p) {
    auto ch = std::make_shared<RequestChannel>();
    engine.add_request(greedy_request(id, ref_.ids(p), 10), ch);
    return ch;
  };
  auto decoding = add("decoding", 1);  // 9 tokens: decodes from step 2
  auto prefilling = add("prefilling", 3);  // 150 tokens in chunks of 31
  auto waiting = add("waiting", 2);        // max_num_seqs = 2: waits
  auto survivor_ch = add("survivor", 0);
  engine.step();
  engine.step();
  ASSERT_EQ(engine.scheduler().num_running(), 2);
  ASSERT_EQ(engine.scheduler().num_waiting(), 2);
  waiting->cancel();                                   // reader dropped while waiting
  EXPECT_TRUE(engine.abort_request("prefilling"));     // by id, mid-prefill
  engine.step();
  decoding->cancel();                                  // reader dropped mid-decode
  engine.step();
  EXPECT_FALSE(engine.abort_request("no-such-request"));
  for (auto* ch : {&waiting, &prefilling, &decoding}) {
    RequestResult r;
    collect(**ch, r);
    EXPECT_TRUE(r.done);
    EXPECT_EQ(r.choices[0].finish, FinishReason::Abort);
  }
  while (engine.has_unfinished()) engine.step();
  RequestResult s;
  collect(*survivor_ch, s);
  const std::vector<int32_t> g0 = ref_.greedy(0);
  EXPECT_EQ(s.choices.at(0).tokens, std::vector<int32_t>(g0.begin(), g0.begin() + 10));
  EXPECT_TRUE(engine.check_idle());
  EXPECT_EQ(engine.block_manager().num_used_blocks(), 0);
  EXPECT_EQ(engine.stats().num_requests_finished[static_cast<int>(FinishReason::Abort)], 3);
}

TEST_F(EngineRequests, BadRequestsAreRefusedUpFront) {
  auto status_of = [&](const GenerationRequest& r) {
    try {
      engine_->add_request(r, std::make_shared<RequestChannel>());
    } catch (const RequestError& e) {
      return e.status();
    }
    return 0;
  };
  GenerationRequest too_long = greedy_request("a", prompt_, 512);
  EXPECT_EQ(status_of(too_long), 400);
  EXPECT_EQ(status_of(greedy_request("b", {1, 2, 384}, 4)), 400) << "token id outside the vocabulary";
  EXPECT_EQ(status_of(greedy_request("c", {}, 4)), 400);
  GenerationRequest tags = greedy_request("d", {1, 2, 3}, 4);
  tags.prompt_modalities = {ModalityTag{Modality::Image, 0}};
  EXPECT_EQ(status_of(tags), 400);
  EXPECT_EQ(status_of(greedy_request("e", {1, 2, 3}, 4)), 0);
  EXPECT_EQ(status_of(greedy_request("e", {1, 2, 3}, 4)), 400) << "duplicate id";
  EXPECT_EQ(engine_->stats().num_requests_rejected, 5);
  engine_->abort_request("e");
  // Stop strings need a text decoder.
  Engine no_text(test_config(), LlmDecoder::load(fixture_model_dir(kModel)));
  GenerationRequest stop = greedy_request("f", {1, 2, 3}, 4);
  stop.params.stop = {"x"};
  EXPECT_THROW(no_text.add_request(stop, std::make_shared<RequestChannel>()), RequestError);
}

TEST_F(EngineRequests, FullWaitingQueueIs429) {
  EngineConfig c = test_config();
  c.scheduler.max_waiting = 2;
  Engine engine(c, LlmDecoder::load(fixture_model_dir(kModel)));
  engine.add_request(greedy_request("a", {1, 2}, 2), std::make_shared<RequestChannel>());
  engine.add_request(greedy_request("b", {1, 2}, 2), std::make_shared<RequestChannel>());
  try {
    engine.add_request(greedy_request("c", {1, 2}, 2), std::make_shared<RequestChannel>());
    FAIL() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 429);
  }
  engine.step();  // both admitted: room again
  EXPECT_NO_THROW(engine.add_request(greedy_request("c", {1, 2}, 2), std::make_shared<RequestChannel>()));
  while (engine.has_unfinished()) engine.step();
}

TEST(EngineConfigCheck, CacheTooSmallForMaxModelLenIsALoadError) {
  EngineConfig c = test_config(16, 8);  // 128 tokens
  c.max_model_len = 200;
  try {
    Engine e(c, LlmDecoder::load(fixture_model_dir(kModel)));
    FAIL();
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("less than one sequence of --max-model-len 200"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 128 here"), std::string::npos) << e.what();
  }
}

// A length taken from the model (no --max-model-len) is lowered to what the cache holds: the engine
// starts, serves prompts that fit and refuses longer ones as request errors.
TEST(EngineConfigCheck, ModelLengthBeyondTheCacheIsLoweredToIt) {
  EngineConfig c = test_config(16, 8);  // 128 tokens
  c.max_model_len = 0;                   // the model's 512 positions
  Engine engine(c, LlmDecoder::load(fixture_model_dir(kModel)));
  ASSERT_GT(engine.decoder().config().max_position_embeddings, 128);
  EXPECT_EQ(engine.max_model_len(), 128);
  std::vector<int32_t> long_prompt(200, 1);
  EXPECT_THROW(engine.add_request(greedy_request("long", long_prompt, 2), std::make_shared<RequestChannel>()),
               RequestError);
  engine.add_request(greedy_request("short", {1, 2, 3}, 2), std::make_shared<RequestChannel>());
  while (engine.has_unfinished()) engine.step();
}

}  // namespace
}  // namespace vlm::testing
