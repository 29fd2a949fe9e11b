// Prefix caching through the engine: a repeated prompt takes every full block from the cache
// (usage.cached_tokens) and generates what the cache-off engine generates, logprobs included,
// also for n = 2, seeded sampling, chunked prefill and a multi-turn history; on LLaVA a repeated
// image skips the encoder and still matches Hugging Face, a changed image or a different image
// order misses from the block that holds it on; 1,000 random requests with aborts, n = 2 and
// preemptions in a small cache leave no block behind (integrity checked after every step).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/families/llava.h"
#include "model/decoder/safetensors.h"
#include "tests/engine/engine_test_util.h"

namespace vlm::testing {
namespace {

std::vector<int32_t> tokens(int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(3 + rng() % 380);  // llama_tiny: 384 ids
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

EngineConfig config(bool cache, int budget = 512) {
  EngineConfig c = test_config(4, 256, budget);
  c.enable_prefix_caching = cache;
  return c;
}

void expect_same_outputs(const RequestResult& on, const RequestResult& off, const std::string& id) {
  ASSERT_TRUE(on.done && off.done) << id;
  ASSERT_EQ(on.choices.size(), off.choices.size()) << id;
  for (const auto& [i, c] : off.choices) {
    const ChoiceResult& d = on.choices.at(i);
    EXPECT_EQ(d.tokens, c.tokens) << id << " choice " << i;
    ASSERT_EQ(d.logprobs.size(), c.logprobs.size()) << id;
    for (size_t t = 0; t < c.logprobs.size(); ++t)
      EXPECT_NEAR(d.logprobs[t].logprob, c.logprobs[t].logprob, 1e-4 * std::max(1.0f, std::fabs(c.logprobs[t].logprob)))
          << id << " choice " << i << " token " << t;
  }
}

TEST(PrefixCacheEngine, RepeatedPromptHitsEveryFullBlockWithTheSameOutputs) {
  const std::vector<int32_t> p = tokens(30, 1);
  auto on = make_engine("llama_tiny", config(true));
  auto off = make_engine("llama_tiny", config(false));
  auto req = [&](const std::string& id, std::vector<int32_t> prompt) {
    GenerationRequest r = greedy_request(id, std::move(prompt), 6);
    r.params.logprobs = 2;
    return r;
  };
  const RequestResult first = run_engine(*on, {{0, req("a", p)}}).at("a");
  EXPECT_EQ(first.usage->cached_tokens, 0);
  const RequestResult again = run_engine(*on, {{0, req("b", p)}}).at("b");
  EXPECT_EQ(again.usage->cached_tokens, 28) << "all 7 full blocks of 30 tokens (the 8th is partial)";
  const RequestResult ref = run_engine(*off, {{0, req("a", p)}}).at("a");
  EXPECT_EQ(ref.usage->cached_tokens, 0);
  expect_same_outputs(first, ref, "first");
  expect_same_outputs(again, ref, "again");

  // A changed token at position 13 (block 3) misses from block 3 on.
  std::vector<int32_t> changed = p;
  changed[13] = changed[13] == 5 ? 6 : 5;
  const RequestResult c_on = run_engine(*on, {{0, req("c", changed)}}).at("c");
  EXPECT_EQ(c_on.usage->cached_tokens, 12);
  expect_same_outputs(c_on, run_engine(*off, {{0, req("c", changed)}}).at("c"), "changed");

  // The next turn: history (prompt + answer) plus a new message hits the history's blocks,
  // generated tokens included (published as decode filled them).
  const std::vector<int32_t> turn2 = concat(concat(p, first.choices.at(0).tokens), tokens(9, 2));
  const RequestResult t_on = run_engine(*on, {{0, req("t", turn2)}}).at("t");
  EXPECT_EQ(t_on.usage->cached_tokens, 32) << "30 + 5 computed tokens of the first turn: 8 full blocks";
  expect_same_outputs(t_on, run_engine(*off, {{0, req("t", turn2)}}).at("t"), "turn 2");
  EXPECT_GT(on->stats().prefix_cache_hits, 0);
  EXPECT_EQ(off->stats().prefix_cache_queries, 0);
}

// Many requests over a few shared prefixes, at once and in waves, with n = 2, seeded sampling
// and 7-token prefill chunks: every output equals the cache-off engine's.
TEST(PrefixCacheEngine, MixedWorkloadMatchesCacheOff) {
  std::vector<Submission> subs;
  const std::vector<std::vector<int32_t>> prefixes = {tokens(23, 10), tokens(40, 11), tokens(9, 12)};
  for (int i = 0; i < 18; ++i) {
    GenerationRequest r = greedy_request("r" + std::to_string(i),
                                         concat(prefixes[static_cast<size_t>(i % 3)], tokens(i % 5, 100 + i)), 5);
    r.params.logprobs = 1;
    if (i % 4 == 1) r.params.n = 2;
    if (i % 3 == 2) {
      r.params.temperature = 0.8f;
      r.params.seed = 1000 + i;
    }
    subs.push_back({(i / 6) * 9, r});
  }
  auto on = make_engine("llama_tiny", config(true, 7));
  auto off = make_engine("llama_tiny", config(false, 7));
  const auto a = run_engine(*on, subs), b = run_engine(*off, subs);
  int64_t cached = 0;
  for (const auto& [id, r] : b) {
    expect_same_outputs(a.at(id), r, id);
    cached += a.at(id).usage->cached_tokens;
  }
  EXPECT_GT(cached, 0);
  EXPECT_LT(on->stats().num_computed_prefill_tokens, off->stats().num_computed_prefill_tokens);
}

// SinkRouter: a request that hits the cache still captures its anchors (from the cached first
// block, at its last prefill chunk) and routes its decode exactly as without the cache.
TEST(PrefixCacheEngine, SinkRouterAnchorsOnAHit) {
  const Reference ref = load_reference("qwen2_tiny");
  const int p = ref.num_prompts() - 1;  // the longest prompt
  auto run = [&](bool cache, int times) {
    EngineConfig c = test_config(4, 256, 512);
    c.enable_prefix_caching = cache;
    c.sink_router = true;
    c.sink_router_config.c0 = -2.0;  // every group of the routed layer is a sink group: anchors decide
    auto engine = make_engine("qwen2_tiny", c);
    RequestResult last;
    for (int i = 0; i < times; ++i) {
      GenerationRequest r = greedy_request("s", ref.ids(p), 6);
      r.params.logprobs = 1;
      last = run_engine(*engine, {{0, r}}).at("s");
    }
    return last;
  };
  const RequestResult off = run(false, 1), on = run(true, 2);
  EXPECT_GT(on.usage->cached_tokens, 0);
  EXPECT_GT(on.usage->sink_groups_routed, 0);
  EXPECT_EQ(on.usage->sink_groups_routed, off.usage->sink_groups_routed);
  EXPECT_EQ(on.usage->sink_groups_skipped, off.usage->sink_groups_skipped);
  expect_same_outputs(on, off, "routed");
}

// ---- LLaVA: media identity -------------------------------------------------------------------

const std::string kLlava = std::string(VLM_FIXTURES_DIR) + "/llava/llava_small";

struct LlavaCase {
  GenerationRequest request;
  std::vector<int32_t> greedy;
};

// HF's prompt k (input_ids, pixel_values, greedy tokens) as a request.
LlavaCase llava_case(int k) {
  static const auto model = LlavaModel::load(kLlava);
  static const auto ref = SafetensorsFile::open(kLlava + "/reference.safetensors");
  auto ints = [&](const std::string& name) {
    const TensorView& t = ref->tensors().at(name);
    return std::vector<int32_t>(t.as<const int32_t>(), t.as<const int32_t>() + t.numel());
  };
  const std::string p = "p" + std::to_string(k);
  LlavaCase c;
  c.greedy = ints(p + ".greedy");
  c.request = greedy_request(p, ints(p + ".ids"), static_cast<int>(c.greedy.size()));
  const TensorView& px = ref->tensors().at(p + ".pixels");  // [N, 3, S, S]
  const int64_t N = px.dim(0), per = px.numel() / N;
  c.request.prompt_modalities = model->build_prompt(c.request.prompt_ids, static_cast<int32_t>(N)).modalities;
  for (int64_t i = 0; i < N; ++i) {
    const float* src = px.as<const float>() + i * per;
    c.request.images.push_back({std::vector<float>(src, src + per), static_cast<int>(px.dim(2)), static_cast<int>(px.dim(3))});
  }
  return c;
}

std::unique_ptr<Engine> llava_engine(bool cache) {
  EngineConfig c = test_config(4, 128, 512);
  c.enable_prefix_caching = cache;
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(LlavaModel::load(kLlava)));
}

// First prompt position of media item k.
int32_t first_media_token(const GenerationRequest& r, int32_t k) {
  for (size_t i = 0; i < r.prompt_modalities.size(); ++i)
    if (r.prompt_modalities[i].modality != Modality::Text && r.prompt_modalities[i].media_index == k)
      return static_cast<int32_t>(i);
  return -1;
}

TEST(PrefixCacheEngine, RepeatedImageSkipsTheEncoderAndMatchesHf) {
  const LlavaCase c = llava_case(0);
  auto engine = llava_engine(true);
  const int64_t N = static_cast<int64_t>(c.request.images.size());
  EXPECT_EQ(run_engine(*engine, {{0, c.request}}).at("p0").choices.at(0).tokens, c.greedy);
  EXPECT_EQ(engine->runner().num_images_encoded(), N);
  const RequestResult again = run_engine(*engine, {{0, c.request}}).at("p0");
  EXPECT_EQ(again.choices.at(0).tokens, c.greedy) << "from the cache, still Hugging Face's tokens";
  const auto P = static_cast<int64_t>(c.request.prompt_ids.size());
  EXPECT_EQ(again.usage->cached_tokens, (P - 1) / 4 * 4);
  EXPECT_EQ(engine->runner().num_images_encoded(), N) << "every image token was cached: no encoding";
}

TEST(PrefixCacheEngine, ChangedImageOrImageOrderMissesFromItsBlock) {
  const LlavaCase c = llava_case(1);
  ASSERT_GE(c.request.images.size(), 2u);
  ASSERT_NE(c.request.images[0].data, c.request.images[1].data);
  const int32_t f0 = first_media_token(c.request, 0), f1 = first_media_token(c.request, 1);
  auto on = llava_engine(true);
  auto off = llava_engine(false);
  EXPECT_EQ(run_engine(*on, {{0, c.request}}).at("p1").choices.at(0).tokens, c.greedy);

  GenerationRequest second = c.request;  // image 1 replaced by image 0
  second.images[1] = second.images[0];
  const int64_t encoded = on->runner().num_images_encoded();
  const RequestResult s_on = run_engine(*on, {{0, second}}).at("p1");
  EXPECT_EQ(s_on.usage->cached_tokens, f1 / 4 * 4);
  ASSERT_GE(f1 / 4 * 4, f0 + 16) << "the fixture's image 0 ends before image 1's block";
  EXPECT_EQ(on->runner().num_images_encoded() - encoded, static_cast<int64_t>(c.request.images.size()) - 1)
      << "image 0's tokens were all cached: only it was not encoded again";
  expect_same_outputs(s_on, run_engine(*off, {{0, second}}).at("p1"), "image 1 changed");

  GenerationRequest swapped = c.request;
  std::swap(swapped.images[0], swapped.images[1]);
  const RequestResult w_on = run_engine(*on, {{0, swapped}}).at("p1");
  EXPECT_EQ(w_on.usage->cached_tokens, f0 / 4 * 4);
  expect_same_outputs(w_on, run_engine(*off, {{0, swapped}}).at("p1"), "images swapped");
}

// ---- no leaks --------------------------------------------------------------------------------

TEST(PrefixCacheEngine, ThousandRandomRequestsWithAbortsAndPreemptionsLeakNoBlock) {
  EngineConfig c = test_config(4, 40, 48);  // 160 slots: preemptions
  c.max_model_len = 96;
  c.scheduler.max_num_seqs = 8;
  auto engine = make_engine("llama_tiny", c);
  std::mt19937 rng(7);
  const std::vector<std::vector<int32_t>> prefixes = {tokens(8, 20), tokens(17, 21), tokens(31, 22), tokens(44, 23)};
  std::map<std::string, std::shared_ptr<RequestChannel>> live;
  int submitted = 0, aborted = 0, finished = 0;
  for (int step = 0; step < 200000 && (submitted < 1000 || engine->has_unfinished()); ++step) {
    for (int k = 0; k < 2 && submitted < 1000 && engine->scheduler().num_waiting() < 24; ++k) {
      std::vector<int32_t> prompt = concat(prefixes[rng() % prefixes.size()], tokens(static_cast<int32_t>(rng() % 9), rng()));
      GenerationRequest r = greedy_request("q" + std::to_string(submitted++), prompt, 1 + static_cast<int>(rng() % 12));
      if (rng() % 5 == 0) r.params.n = 2;
      if (rng() % 7 == 0) r.cache_salt = "salt" + std::to_string(rng() % 2);
      auto ch = std::make_shared<RequestChannel>();
      live[r.id] = ch;
      engine->add_request(r, ch);
    }
    if (!live.empty() && rng() % 6 == 0) {  // abort a random live request (waiting or running)
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      if (engine->abort_request(it->first)) ++aborted;
    }
    engine->step();  // check_integrity_every_step
    for (auto it = live.begin(); it != live.end();) {
      RequestResult r;
      collect(*it->second, r);
      if (r.done) {
        ++finished;
        it = live.erase(it);
      } else {
        ++it;
      }
    }
  }
  EXPECT_EQ(submitted, 1000);
  EXPECT_FALSE(engine->has_unfinished());
  EXPECT_TRUE(engine->check_idle());
  EXPECT_EQ(engine->block_manager().num_used_blocks(), 0);
  EXPECT_GT(aborted, 50);
  EXPECT_GT(engine->stats().num_preemptions, 0);
  EXPECT_GT(engine->stats().prefix_cache_hits, 0);
  EXPECT_GT(engine->block_manager().prefix_cache_stats().evicted, 0);
  EXPECT_EQ(engine->stats().num_integrity_failures, 0);
}

}  // namespace
}  // namespace vlm::testing
