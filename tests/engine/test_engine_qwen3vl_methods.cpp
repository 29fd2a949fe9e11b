// The three attention methods on Qwen3-VL (tests/fixtures/qwen3vl, the tiny model) through the
// engine. A Qwen3-VL video reaches the engine as one item per temporal group with its timestamp
// text between the groups ("<|vision_end|><t seconds><|vision_start|>", tagged text); the engine
// takes consecutive groups as one video (engine/media_inputs.h): the grid's known stride is the
// group period in prompt positions (tokens per group + the text between), LOOK-M's tags keep the
// timestamps text. Checked on the fixture's video cases (p3: 2 groups of 6 tokens, p5: the video
// file, 2 groups of 12) and on a longer video built from p5's tokens (24 groups; the timestamps
// grow a digit at 10 s, so the period is 20 then 21): the engine's strides, and each method's
// error against the dense path (relative L2 of the full logprob vectors) measured (test
// properties) and bounded; with the methods off (requests overriding an engine that turns them
// on), the logprobs equal the dense path's bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "engine/media_inputs.h"
#include "model/families/qwen3_vl.h"
#include "model/media/qwen3vl_video.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/qwen3vl_fixture.h"

namespace vlm::testing {
namespace {

constexpr int kGroups = 24;

std::unique_ptr<Engine> qwen3vl_engine(const EngineConfig& c) {
  return std::make_unique<Engine>(c, std::unique_ptr<Model>(Qwen3VLModel::load(qwen3vl_model_dir())));
}

EngineConfig config() {
  EngineConfig c = test_config(16, 256, 256);  // prefill chunks of <= 256 tokens
  c.max_model_len = 1024;
  return c;
}

// The ids of "<t seconds>" in the fixture's tokenizer ('<' '0'..'9' '.' " seconds" '>'), read
// off p5's two timestamps (checked against them).
std::vector<int32_t> timestamp_ids(double seconds, const std::vector<int32_t>& lt_dot_tail, int32_t digit0) {
  std::vector<int32_t> out;
  for (char ch : qwen3vl_timestamp_text(seconds)) {
    if (ch == '<') out.push_back(lt_dot_tail[0]);
    else if (ch == '.') out.push_back(lt_dot_tail[1]);
    else if (ch >= '0' && ch <= '9') out.push_back(digit0 + (ch - '0'));
    else if (ch == ' ') break;  // " seconds>"
  }
  out.push_back(lt_dot_tail[2]);
  out.push_back(lt_dot_tail[3]);
  return out;
}

class EngineQwen3VLMethods : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
    model_ = Qwen3VLModel::load(qwen3vl_model_dir());
    ref_ = std::make_unique<Qwen3VLReference>(qwen3vl_reference());
    if (!ref_->has("p5.ids")) GTEST_SKIP() << "the fixture has no video-file case p5";
  }

  GenerationRequest fixture_request(int k, int max_tokens) const {
    const std::string p = "p" + std::to_string(k);
    GenerationRequest r = greedy_request(p, ref_->ints(p + ".ids"), max_tokens);
    Qwen3VLPromptItems pi = qwen3vl_prompt_items(*model_, *ref_, k);
    r.prompt_modalities = pi.prompt.modalities;
    r.images = std::move(pi.items);
    return r;
  }

  // p5's prompt with its two groups replaced by kGroups groups at 0.5, 1.5, ... s (group g is
  // p5's group g % 2): "<t seconds><|vision_start|>" 12 video tokens "<|vision_end|>" each.
  GenerationRequest long_video_request(int max_tokens) const {
    const GenerationRequest p5 = fixture_request(5, max_tokens);
    const auto& ids = p5.prompt_ids;
    std::vector<int32_t> first;  // the groups' first video tokens
    for (size_t i = 0; i < ids.size(); ++i)
      if (p5.prompt_modalities[i].modality == Modality::Video && (i == 0 || p5.prompt_modalities[i - 1].modality == Modality::Text))
        first.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(first.size(), 2u);
    const int32_t per = 12, vstart = ids[first[0] - 1], vend = ids[first[0] + per];
    // p5's timestamps: ids [first[g] - 7, first[g] - 1): '<' digit '.' digit " seconds" '>', group 0
    // at 0.x s, group 1 at 1.x s
    const std::vector<int32_t> ts0(ids.begin() + first[0] - 7, ids.begin() + first[0] - 1);
    const std::vector<int32_t> ts1(ids.begin() + first[1] - 7, ids.begin() + first[1] - 1);
    const std::vector<int32_t> lt_dot_tail = {ts0[0], ts0[2], ts0[4], ts0[5]};
    const int32_t digit0 = ts0[1];
    EXPECT_EQ(timestamp_ids(0.1 * (ts0[3] - digit0), lt_dot_tail, digit0), ts0);
    EXPECT_EQ(timestamp_ids(1 + 0.1 * (ts1[3] - digit0), lt_dot_tail, digit0), ts1);
    GenerationRequest r = greedy_request("long", {}, max_tokens);
    r.prompt_ids.assign(ids.begin(), ids.begin() + first[0] - 7);
    r.prompt_modalities.assign(r.prompt_ids.size(), ModalityTag{});
    for (int g = 0; g < kGroups; ++g) {
      for (int32_t t : timestamp_ids(0.5 + g, lt_dot_tail, digit0)) r.prompt_ids.push_back(t);
      r.prompt_ids.push_back(vstart);
      r.prompt_modalities.resize(r.prompt_ids.size());
      for (int j = 0; j < per; ++j) {
        r.prompt_ids.push_back(model_->video_token_id());
        r.prompt_modalities.push_back({Modality::Video, g});
      }
      r.prompt_ids.push_back(vend);
      r.prompt_modalities.emplace_back();
      MediaPixels item = p5.images[static_cast<size_t>(g % 2)];
      item.video_group = g;
      item.group_seconds = {0.5 + g};
      r.images.push_back(std::move(item));
    }
    r.prompt_ids.insert(r.prompt_ids.end(), ids.begin() + first[1] + per + 1, ids.end());
    r.prompt_modalities.resize(r.prompt_ids.size());
    return r;
  }

  std::unique_ptr<Qwen3VLModel> model_;
  std::unique_ptr<Qwen3VLReference> ref_;
};

// Relative L2 distance of two runs' logprob vectors at step `step` (every token of the vocab).
double logprob_error(const RequestResult& a, const RequestResult& dense, size_t step) {
  const auto& x = a.choices.at(0).logprobs.at(step).top;
  const auto& y = dense.choices.at(0).logprobs.at(step).top;
  EXPECT_EQ(x.size(), y.size());
  std::map<int32_t, float> ya;
  for (const TopLogprob& t : y) ya[t.token_id] = t.logprob;
  double num = 0, den = 0;
  for (const TopLogprob& t : x) {
    const double d = t.logprob - ya.at(t.token_id);
    num += d * d;
    den += static_cast<double>(ya.at(t.token_id)) * ya.at(t.token_id);
  }
  return std::sqrt(num / den);
}

TEST_F(EngineQwen3VLMethods, FixtureVideoIsOneVideoWithTheTimestampTextInItsPeriod) {
  auto engine = qwen3vl_engine(config());
  // p3: 2 groups of 6 tokens, 8 text tokens between ("<|vision_end|>", "<0.x seconds>" as 6, "<|vision_start|>")
  // p4: image, the video (2 groups of 4), image; p5: 2 groups of 12.
  const struct { int k, per, period, first_item; } cases[] = {{3, 6, 14, 0}, {4, 4, 12, 1}, {5, 12, 20, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE("p" + std::to_string(c.k));
    const GenerationRequest r = fixture_request(c.k, 1);
    const auto media = engine->check_media(r);
    ASSERT_TRUE(media);
    const auto spans = video_token_spans(r.images, media->first_token, media->num_tokens, media->tokens_per_frame);
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].media_index, c.first_item);
    EXPECT_EQ(spans[0].num_items, 2);
    EXPECT_EQ(spans[0].num_frames, 2);
    EXPECT_EQ(spans[0].tokens_per_frame, c.per);
    EXPECT_EQ(spans[0].frame_period(), c.period);
    EXPECT_EQ(media->video_frame_tokens, std::vector<int32_t>{c.period});
    // the text between the groups stays text (LOOK-M's text prior keeps it, the embeddings skip it)
    for (int32_t pos = spans[0].frame_first[0] + c.per; pos < spans[0].frame_first[1]; ++pos)
      EXPECT_EQ(r.prompt_modalities.at(pos).modality, Modality::Text) << pos;
  }
}

TEST_F(EngineQwen3VLMethods, LongVideoHasOnePeriodPerTimestampLength) {
  auto engine = qwen3vl_engine(config());
  const GenerationRequest r = long_video_request(1);
  const auto media = engine->check_media(r);
  ASSERT_TRUE(media);
  const auto spans = video_token_spans(r.images, media->first_token, media->num_tokens, media->tokens_per_frame);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].num_frames, kGroups);
  // groups 1..9 start 20 after the previous ("<g.5 seconds>" 6 tokens), 10..23 21 after (7 tokens)
  EXPECT_EQ(media->video_frame_tokens, (std::vector<int32_t>{21, 20}));
  // Without the group indices every group is a one-frame video of its own: strides of 12.
  GenerationRequest split = r;
  for (MediaPixels& m : split.images) m.video_group = -1;
  EXPECT_EQ(engine->check_media(split)->video_frame_tokens, std::vector<int32_t>(kGroups, 12));
}

constexpr int kSteps = 3;

GenerationRequest with_logprobs(GenerationRequest r, int64_t vocab) {
  r.params.logprobs = static_cast<int>(vocab);  // every token's logprob at every step
  return r;
}

RequestResult run_one(const EngineConfig& c, const GenerationRequest& r, EngineStats* stats = nullptr) {
  auto engine = qwen3vl_engine(c);
  RequestResult out = run_engine(*engine, {{0, r}}).at(r.id);
  EXPECT_TRUE(out.done);
  EXPECT_FALSE(out.error) << out.error->message;
  if (stats) *stats = engine->stats();
  return out;
}

void expect_bit_identical(const RequestResult& a, const RequestResult& b) {
  ASSERT_EQ(a.choices.at(0).tokens, b.choices.at(0).tokens);
  const auto &x = a.choices.at(0).logprobs, &y = b.choices.at(0).logprobs;
  ASSERT_EQ(x.size(), y.size());
  for (size_t s = 0; s < x.size(); ++s) {
    ASSERT_EQ(x[s].top.size(), y[s].top.size());
    for (size_t i = 0; i < x[s].top.size(); ++i) {
      EXPECT_EQ(x[s].top[i].token_id, y[s].top[i].token_id) << s << " " << i;
      EXPECT_EQ(x[s].top[i].logprob, y[s].top[i].logprob) << s << " " << i;
    }
  }
}

EngineConfig all_methods_on() {
  EngineConfig c = config();
  c.sparse_prefill.method = SparsePrefillMethod::MMInference;
  c.sparse_prefill.min_prompt_len = 0;
  c.look_m = LookMSetting{true, {}};
  c.sink_router = true;
  return c;
}

TEST_F(EngineQwen3VLMethods, MethodsOffAreTheDensePathBitForBit) {
  const int64_t V = model_->decoder().config().vocab_size;
  for (const GenerationRequest& base : {fixture_request(5, kSteps), long_video_request(kSteps)}) {
    SCOPED_TRACE(base.id);
    const GenerationRequest r = with_logprobs(base, V);
    const RequestResult dense = run_one(config(), r);
    GenerationRequest off = r;  // the engine turns every method on, the request each off
    off.params.sparse_prefill = SparsePrefillMethod::Off;
    off.params.sink_router = false;
    off.look_m = LookMSetting{};
    EngineStats st;
    expect_bit_identical(run_one(all_methods_on(), off, &st), dense);
    EXPECT_EQ(st.num_look_m_compressions, 0);
    EXPECT_EQ(st.sink_groups_routed, 0);
  }
}

TEST_F(EngineQwen3VLMethods, SparsePrefillOnTheLongVideoIsCloseToDense) {
  const int64_t V = model_->decoder().config().vocab_size;
  const GenerationRequest r = with_logprobs(long_video_request(1), V);
  const RequestResult dense = run_one(config(), r);
  for (SparsePrefillMethod m : {SparsePrefillMethod::Grid, SparsePrefillMethod::MMInference}) {
    SCOPED_TRACE(sparse_prefill_method_name(m));
    EngineConfig c = config();
    c.sparse_prefill.method = m;
    c.sparse_prefill.min_prompt_len = 0;
    c.sparse_prefill.block = 32;
    const double err = logprob_error(run_one(c, r), dense, 0);  // the prefill's last row
    RecordProperty(std::string("logprob_rel_l2_") + sparse_prefill_method_name(m), std::to_string(err));
    EXPECT_GT(err, 0.0) << "the sparse path did not run";
    EXPECT_LT(err, 0.2);
    // The same without the group indices (every group a one-frame video: stride 12), and with the
    // search limited to the known strides, for the record.
    GenerationRequest split = r;
    for (MediaPixels& it : split.images) it.video_group = -1;
    const double err_split = logprob_error(run_one(c, split), dense, 0);
    RecordProperty(std::string("logprob_rel_l2_groups_apart_") + sparse_prefill_method_name(m), std::to_string(err_split));
    EngineConfig known = c;
    known.sparse_prefill.grid.min_stride = known.sparse_prefill.default_head.grid.min_stride = 1 << 20;
    const double err_known = logprob_error(run_one(known, r), dense, 0);
    const double err_known_split = logprob_error(run_one(known, split), dense, 0);
    RecordProperty(std::string("logprob_rel_l2_known_only_") + sparse_prefill_method_name(m), std::to_string(err_known));
    RecordProperty(std::string("logprob_rel_l2_known_only_groups_apart_") + sparse_prefill_method_name(m),
                   std::to_string(err_known_split));
    EXPECT_NE(err_known, err_known_split) << "the engine's known strides do not reach the planner";
    std::printf("%s: %.4f, groups apart %.4f; known strides only %.4f, groups apart %.4f\n", sparse_prefill_method_name(m), err, err_split, err_known, err_known_split);
  }
}

TEST_F(EngineQwen3VLMethods, LookMCompressesTheLongVideoAndDecodesCloseToDense) {
  const int64_t V = model_->decoder().config().vocab_size;
  const GenerationRequest r = with_logprobs(long_video_request(kSteps), V);
  const RequestResult dense = run_one(config(), r);
  EngineConfig c = config();
  c.look_m = LookMSetting{true, {}};
  EngineStats st;
  const RequestResult lm = run_one(c, r, &st);
  EXPECT_EQ(st.num_look_m_compressions, 1);
  EXPECT_EQ(logprob_error(lm, dense, 0), 0.0);  // the prefill runs on the full cache
  ASSERT_EQ(lm.choices.at(0).tokens.at(0), dense.choices.at(0).tokens.at(0));
  const double err = logprob_error(lm, dense, 1);  // the first decode step, on the compressed cache
  RecordProperty("logprob_rel_l2_look_m_step1", std::to_string(err));
  // A budget of 90 % (45 % important + 45 % recent) moves the logits less than the default 20 %.
  EngineConfig c90 = c;
  c90.look_m.params.important_ratio = c90.look_m.params.recent_ratio = 0.45;
  const RequestResult lm90 = run_one(c90, r);
  ASSERT_EQ(lm90.choices.at(0).tokens.at(0), dense.choices.at(0).tokens.at(0));
  const double err90 = logprob_error(lm90, dense, 1);
  RecordProperty("logprob_rel_l2_look_m_90_step1", std::to_string(err90));
  std::printf("look-m step 1: budget 20%% %.4f, 90%% %.4f\n", err, err90);
  EXPECT_GT(err, 0.0) << "the compressed cache decoded as the full one";
  EXPECT_LE(err90, err);
  EXPECT_LT(err, 0.5);
}

TEST_F(EngineQwen3VLMethods, SinkRouterRoutesTheLongVideoDecodeCloseToDense) {
  const int64_t V = model_->decoder().config().vocab_size;
  const GenerationRequest r = with_logprobs(long_video_request(kSteps), V);
  const RequestResult dense = run_one(config(), r);
  EngineConfig c = config();
  c.sink_router = true;
  c.sink_router_config.c0 = -2.0;  // every group of the routed layer (layer 2) is a sink group: skipped
  EngineStats st;
  const RequestResult sr = run_one(c, r, &st);
  const ModelConfig& mc = model_->decoder().config();
  // every decode row (the first token comes from prefill) x 1 routed layer x Hkv groups
  EXPECT_EQ(st.sink_groups_routed, (kSteps - 1) * mc.num_kv_heads);
  EXPECT_EQ(st.sink_groups_skipped, st.sink_groups_routed);
  EXPECT_EQ(logprob_error(sr, dense, 0), 0.0);  // prefill is not routed
  ASSERT_EQ(sr.choices.at(0).tokens.at(0), dense.choices.at(0).tokens.at(0));
  const double err = logprob_error(sr, dense, 1);
  RecordProperty("logprob_rel_l2_sink_router_all_skipped_step1", std::to_string(err));
  std::printf("sink router, every group skipped, step 1: %.4f\n", err);
  EXPECT_GT(err, 0.0) << "skipping every group of layer 2 changed nothing";
  EXPECT_LT(err, 0.5);
}

}  // namespace
}  // namespace vlm::testing
