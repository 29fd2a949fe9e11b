// SinkRouter through the decoder on the fixture models: a prompt is prefilled (chunks of 32,
// anchors captured at the last chunk), then decoded greedily, teacher-forced with the exact
// path's tokens, once through the exact path and once routed. Measured: max relative logit
// error per decode row, top-1 agreement of the teacher-forced rows, the free-running greedy
// prefix that agrees, and the fraction of groups skipped. The figures are recorded as test
// properties (ctest --output-on-failure / --gtest_output=xml show them) and bounded.
//
// The fixtures are tiny random models (2-3 layers): they have no real attention sinks, so the
// skip rate at a given tau says nothing about real checkpoints; tau = -1 (skip every group of
// every routed layer) is the worst case, tau > 1 (never skip) must reproduce the exact path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/sink_router/sink_router_config.h"
#include "model/methods/sink_anchors.h"
#include "tests/support/decoder_harness.h"

namespace vlm::testing {
namespace {

constexpr int kBlock = 16;

// One sequence through the decoder with its own cache; routing on when config is set.
class Runner {
 public:
  Runner(const LlmDecoder& dec, const SinkRouterConfig* config) : dec_(dec), config_(config) {
    const ModelConfig& c = dec.config();
    KVCacheShape shape;
    shape.num_layers = c.num_layers;
    shape.num_blocks = 64;
    shape.block_size = kBlock;
    shape.num_kv_heads = static_cast<int>(c.num_kv_heads);
    shape.head_dim = static_cast<int>(c.head_dim);
    shape.dtype = DType::F32;
    cache_ = std::make_unique<KVCache>(shape);
    for (int i = 0; i < 64; ++i) blocks_.push_back((i * 37) % 64);  // non-contiguous
  }
  // Feeds tokens [cached, cached + n) of `tokens`; returns the last row's logits.
  std::vector<float> feed(const std::vector<int32_t>& tokens, int n, bool finishes_prefill) {
    SequenceChunk ch;
    ch.token_ids = std::span<const int32_t>(tokens.data() + cached_, n);
    ch.start_pos = cached_;
    ch.block_table = std::span<const int32_t>(blocks_.data(), (cached_ + n + kBlock - 1) / kBlock);
    ch.finishes_prefill = finishes_prefill;
    ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&ch, 1), kBlock);
    if (config_) {
      fb.sink_anchors = {&anchors_};
      fb.sink_router = config_;
      fb.sink_counters = &counters_;
    }
    std::vector<float> logits;
    dec_.forward(fb, cache_->layers(), logits);
    cached_ += n;
    return logits;
  }
  std::vector<float> prefill(const std::vector<int32_t>& tokens, int prompt_len) {
    std::vector<float> last;
    while (cached_ < prompt_len) {
      const int n = std::min(32, prompt_len - cached_);
      last = feed(tokens, n, cached_ + n == prompt_len);
    }
    return last;
  }
  const SinkRouterCounters& counters() const { return counters_; }
  const SinkAnchors& anchors() const { return anchors_; }

 private:
  const LlmDecoder& dec_;
  const SinkRouterConfig* config_;
  std::unique_ptr<KVCache> cache_;
  std::vector<int32_t> blocks_;
  int cached_ = 0;
  SinkAnchors anchors_;
  SinkRouterCounters counters_;
};

int argmax(const std::vector<float>& x) { return static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin()); }

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct Figures {
  double max_rel_err = 0;    // over decode rows (teacher-forced)
  double top1_agree = 0;     // fraction of decode rows with the exact path's argmax
  int greedy_prefix = 0;     // free-running routed greedy tokens equal to the exact ones
  double skip_ratio = 0;
  int64_t groups_routed = 0;
};

std::vector<int32_t> prompt_of(const LlmDecoder& dec, int len) {
  std::vector<int32_t> p;
  uint32_t lcg = 99;
  for (int i = 0; i < len; ++i) {
    lcg = lcg * 1664525u + 1013904223u;
    p.push_back(static_cast<int32_t>((lcg >> 8) % dec.config().vocab_size));
  }
  return p;
}

Figures measure(const LlmDecoder& dec, const SinkRouterConfig& cfg, int prompt_len, int steps) {
  std::vector<int32_t> tokens = prompt_of(dec, prompt_len);
  Runner exact(dec, nullptr), routed(dec, &cfg);
  std::vector<float> le = exact.prefill(tokens, prompt_len), lr = routed.prefill(tokens, prompt_len);
  EXPECT_EQ(std::memcmp(le.data(), lr.data(), le.size() * sizeof(float)), 0) << "prefill must stay exact";
  Figures f;
  int agree = 0;
  for (int i = 0; i < steps; ++i) {
    tokens.push_back(argmax(le));
    le = exact.feed(tokens, 1, false);
    lr = routed.feed(tokens, 1, false);
    f.max_rel_err = std::max(f.max_rel_err, rel_error(lr, le));
    agree += argmax(lr) == argmax(le);
  }
  f.top1_agree = static_cast<double>(agree) / steps;
  f.skip_ratio = routed.counters().groups_routed
                     ? static_cast<double>(routed.counters().groups_skipped) / routed.counters().groups_routed
                     : 0.0;
  f.groups_routed = routed.counters().groups_routed;
  EXPECT_EQ(routed.anchors().groups_routed, routed.counters().groups_routed);
  // Free-running greedy with routing against the exact tokens.
  std::vector<int32_t> free_tokens = prompt_of(dec, prompt_len);
  Runner free_run(dec, &cfg);
  std::vector<float> l = free_run.prefill(free_tokens, prompt_len);
  for (int i = 0; i < steps; ++i) {
    const int t = argmax(l);
    if (t != tokens[prompt_len + i]) break;
    ++f.greedy_prefix;
    free_tokens.push_back(t);
    l = free_run.feed(free_tokens, 1, false);
  }
  return f;
}

void record(const std::string& tag, const Figures& f) {
  ::testing::Test::RecordProperty(tag + "_max_rel_logit_err", std::to_string(f.max_rel_err));
  ::testing::Test::RecordProperty(tag + "_top1_agree", std::to_string(f.top1_agree));
  ::testing::Test::RecordProperty(tag + "_greedy_prefix", std::to_string(f.greedy_prefix));
  ::testing::Test::RecordProperty(tag + "_skip_ratio", std::to_string(f.skip_ratio));
  std::printf("  %-28s max rel logit err %.3e, top-1 agree %.2f, greedy prefix %d, skipped %.2f\n", tag.c_str(),
              f.max_rel_err, f.top1_agree, f.greedy_prefix, f.skip_ratio);
}

class SinkRouterDecoder : public ::testing::TestWithParam<std::string> {};

constexpr int kPrompt = 150, kSteps = 24;

TEST_P(SinkRouterDecoder, NeverSkippingReproducesTheExactPath) {
  auto dec = LlmDecoder::load(fixture_model_dir(GetParam()));
  SinkRouterConfig cfg;
  cfg.c0 = 2.0;  // clamped to tau_max 1.01: no cosine reaches it
  cfg.num_dense_layers = 0;  // every layer through the group-skipping kernel
  const Figures f = measure(*dec, cfg, kPrompt, kSteps);
  record(GetParam() + "_never", f);
  EXPECT_EQ(f.skip_ratio, 0.0);
  EXPECT_EQ(f.groups_routed, int64_t{kSteps} * dec->config().num_layers * dec->config().num_kv_heads);
  EXPECT_LE(f.max_rel_err, 1e-5);
  EXPECT_EQ(f.top1_agree, 1.0);
  EXPECT_EQ(f.greedy_prefix, kSteps);
}

// Worst case on these models: every group of every routed layer skipped (tau = -1). With the
// paper's two dense layers, only qwen2_tiny / llama_tiny (3 layers) have a routed layer.
TEST_P(SinkRouterDecoder, SkippingEverythingIsMeasuredAndBounded) {
  auto dec = LlmDecoder::load(fixture_model_dir(GetParam()));
  const int L = static_cast<int>(dec->config().num_layers);
  for (SinkSurrogate sur : {SinkSurrogate::Zero, SinkSurrogate::AnchorValue})
    for (int dense_layers : {2, 1}) {
      SinkRouterConfig cfg;
      cfg.c0 = -2.0;
      cfg.surrogate = sur;
      cfg.num_dense_layers = dense_layers;
      const Figures f = measure(*dec, cfg, kPrompt, kSteps);
      record(GetParam() + "_all_" + sink_surrogate_name(sur) + "_dense" + std::to_string(dense_layers), f);
      if (dense_layers >= L) {
        EXPECT_EQ(f.groups_routed, 0);
        EXPECT_EQ(f.max_rel_err, 0.0);
        continue;
      }
      EXPECT_EQ(f.skip_ratio, 1.0);
      // Measured (2026-11-22; bench/RESULTS.md): max relative logit error 0.40-1.44, top-1
      // agreement 0.00-0.67 (the anchor-value surrogate is the worse one here: random models'
      // first-token values are not near zero, so they are no no-op). Replacing one whole layer's attention by a surrogate in a random
      // 2-3 layer model moves the logits by tens of percent (no real sinks here); the bounds pin
      // the measured size with headroom, so a broken path (garbage, NaN) fails.
      EXPECT_LE(f.max_rel_err, 1.6);
    }
}

// Routing by a threshold in the middle of the measured score range: part of the groups skip.
TEST_P(SinkRouterDecoder, MidThresholdSkipsPartOfTheGroups) {
  auto dec = LlmDecoder::load(fixture_model_dir(GetParam()));
  SinkRouterConfig cfg;
  cfg.num_dense_layers = 0;
  cfg.aggregation = SinkAggregation::Mean;
  cfg.c0 = 0.0;
  const Figures f = measure(*dec, cfg, kPrompt, kSteps);
  record(GetParam() + "_mean_tau0", f);
  // Measured: 35-59 % of the groups skipped, max relative logit error 1.5-1.6 (every layer
  // routed, so also the first two, which the paper keeps dense).
  EXPECT_GT(f.skip_ratio, 0.2);
  EXPECT_LT(f.skip_ratio, 0.8);
  EXPECT_LE(f.max_rel_err, 2.0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SinkRouterDecoder,
                         ::testing::Values("llama_tiny", "qwen2_tiny", "llama3_tiny", "llama_linear_f32",
                                           "qwen2_yarn_f16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace vlm::testing
