// Tensor parallelism with the attention methods on the CPU (issue 42, round 2): sparse prefill
// (MMInference with a different pattern on every query head, so a rank reading its patterns by
// its local head index would plan other heads' patterns) and SinkRouter (anchors per KV group;
// tau -1 with the anchor-value surrogate: every routed group outputs its own anchor's value; tau
// 0 with the zero surrogate: mixed decisions) and LOOK-M (each KV head's kept tokens from its
// scores; the decode steps then read the compacted cache) through CpuTensorParallelDecoder at TP=2
// give the logits of the unsplit decoder within 1e-5 relative (the TP decoder tests' bound), the
// same greedy tokens, (SinkRouter) the same routed / skipped group counts and (LOOK-M) the same
// compressed length. Replicated KV heads (a group's query heads over two ranks) are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/kv_compression/look_m_params.h"
#include "kernels/sink_router/sink_router_config.h"
#include "kernels/sparse_prefill/sparse_prefill_config.h"
#include "model/decoder/cpu_tensor_parallel_decoder.h"
#include "model/methods/look_m_state.h"
#include "model/methods/sink_anchors.h"
#include "tests/support/decoder_harness.h"

namespace vlm::testing {
namespace {

constexpr int kBlock = 16;

// Which methods a step carries.
struct Methods {
  const SparsePrefillConfig* sparse = nullptr;
  const SinkRouterConfig* sink = nullptr;
  const LookMParams* look_m = nullptr;
};

// One sequence through the decoder on `ranks` CPU ranks (1: the unsplit LlmDecoder), each rank
// with its own cache; prefill in chunks of 32, then greedy decode.
class MethodRunner {
 public:
  MethodRunner(const LlmDecoder& dec, int ranks, Methods m) : dec_(dec), m_(m) {
    if (ranks > 1) tp_ = std::make_unique<CpuTensorParallelDecoder>(dec.config(), dec.weights(), dec.names(), ranks);
    const ModelConfig kc = tp_ ? tp_->kv_config() : dec.config();
    for (int r = 0; r < ranks; ++r) {
      KVCacheShape shape;
      shape.num_layers = kc.num_layers;
      shape.num_blocks = 64;
      shape.block_size = kBlock;
      shape.num_kv_heads = static_cast<int>(kc.num_kv_heads);
      shape.head_dim = static_cast<int>(kc.head_dim);
      shape.dtype = DType::F32;
      caches_.push_back(std::make_unique<KVCache>(shape));
    }
    for (int i = 0; i < 64; ++i) blocks_.push_back((i * 37) % 64);  // non-contiguous
  }

  // Every step's logits rows (last row of each chunk), and the greedy tokens after the prompt.
  std::vector<int32_t> run(std::vector<int32_t> tokens, int prompt_len, int decode, std::vector<float>& rows) {
    if (m_.look_m) {  // an image span inside the prompt (LOOK-M compresses prompts with media)
      std::vector<ModalityTag> tags(static_cast<size_t>(prompt_len));
      for (int j = 16; j < prompt_len - 24; ++j) tags[static_cast<size_t>(j)] = {Modality::Image, 0};
      look_m_ = std::make_unique<LookMState>(*m_.look_m, static_cast<int>(dec_.config().num_layers),
                                             static_cast<int>(dec_.config().num_kv_heads), prompt_len, tags);
    }
    while (cached_ < prompt_len) {
      const int n = std::min(32, prompt_len - cached_);
      append(feed(tokens, n, cached_ + n == prompt_len, prompt_len), rows);
    }
    if (look_m_) {  // the cache keeps compressed_len slots; RoPE positions go on from the prompt
      compressed_len_ = look_m_->compressed_len;
      shift_ = prompt_len - compressed_len_;
      cached_ = compressed_len_;
    }
    std::vector<int32_t> out;
    for (int i = 0; i < decode; ++i) {
      const std::vector<float>& last = rows_.back();
      const auto t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      out.push_back(t);
      tokens.resize(static_cast<size_t>(cached_ + shift_));
      tokens.push_back(t);
      append(feed(tokens, 1, false, prompt_len), rows);
    }
    return out;
  }
  const SinkRouterCounters& counters() const { return counters_; }
  int32_t compressed_len() const { return compressed_len_; }

 private:
  std::vector<float> feed(const std::vector<int32_t>& tokens, int n, bool finishes_prefill, int prompt_len) {
    SequenceChunk ch;
    ch.token_ids = std::span<const int32_t>(tokens.data() + cached_ + shift_, n);
    ch.start_pos = cached_;
    ch.block_table = std::span<const int32_t>(blocks_.data(), (cached_ + n + kBlock - 1) / kBlock);
    ch.finishes_prefill = finishes_prefill;
    ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&ch, 1), kBlock);
    for (int32_t& p : fb.positions) p += shift_;  // logical positions past a compacted prompt
    if (look_m_ && n > 1) fb.look_m = {look_m_.get()};
    if (m_.sparse && n > 1) {
      fb.sparse_prefill = {*m_.sparse};
      fb.prompt_lens = {prompt_len};
    }
    if (m_.sink) {
      fb.sink_anchors = {&anchors_};
      fb.sink_router = m_.sink;
      fb.sink_counters = &counters_;
    }
    std::vector<float> logits;
    if (tp_) {
      std::vector<std::span<const PagedKVLayer>> kv;
      for (auto& c : caches_) kv.push_back(c->layers());
      tp_->forward(fb, kv, logits);
    } else {
      dec_.forward(fb, caches_[0]->layers(), logits);
    }
    cached_ += n;
    return logits;
  }
  void append(std::vector<float> logits, std::vector<float>& rows) {
    rows.insert(rows.end(), logits.begin(), logits.end());
    rows_.push_back(std::move(logits));
  }

  const LlmDecoder& dec_;
  Methods m_;
  std::unique_ptr<CpuTensorParallelDecoder> tp_;
  std::vector<std::unique_ptr<KVCache>> caches_;
  std::vector<int32_t> blocks_;
  std::vector<std::vector<float>> rows_;
  int cached_ = 0;                // cache slots in use
  int shift_ = 0;                 // logical position - cache slot (LOOK-M's evicted tokens)
  int32_t compressed_len_ = -1;
  std::unique_ptr<LookMState> look_m_;
  SinkAnchors anchors_;
  SinkRouterCounters counters_;
};

std::vector<int32_t> long_prompt(int n, int vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 131 + 7) % vocab;
  return t;
}

// A pattern per query head, each plan a different block set over a 160-token prompt.
SparsePrefillConfig per_head_patterns(int layers, int heads) {
  SparsePrefillConfig c;
  c.method = SparsePrefillMethod::MMInference;
  c.min_prompt_len = 0;
  c.block = kBlock;
  c.last_q = 16;
  auto p = std::make_shared<SparseHeadPatterns>();
  for (int l = 0; l < layers; ++l) {
    std::vector<HeadPattern> row;
    for (int h = 0; h < heads; ++h) {
      HeadPattern hp;
      switch (h % 4) {
        case 0: hp.type = HeadPatternType::Dense; break;
        case 1: hp.type = HeadPatternType::AShape, hp.n_init = 16, hp.n_local = 32; break;
        case 2: hp.type = HeadPatternType::VerticalSlash, hp.vertical_size = 8, hp.slash_size = 16; break;
        default: hp.type = HeadPatternType::AShape, hp.n_init = 32, hp.n_local = 16; break;
      }
      row.push_back(hp);
    }
    p->layers.push_back(std::move(row));
  }
  c.head_patterns = p;
  return c;
}

void expect_same(MethodRunner& one, MethodRunner& two, int64_t V, const char* what) {
  const std::vector<int32_t> prompt = long_prompt(160, static_cast<int>(V));
  std::vector<float> a, b;
  const std::vector<int32_t> ga = one.run(prompt, 160, 6, a), gb = two.run(prompt, 160, 6, b);
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_LE(max_row_rel_error(b.data(), a.data(), static_cast<int64_t>(a.size()) / V, V), 1e-5) << what;
  EXPECT_EQ(ga, gb) << what;
}

TEST(TensorParallelMethodsCpu, SparsePrefillPerHeadPatternsEqualOneRank) {
  auto dec = LlmDecoder::load(fixture_model_dir("llama_tiny"));
  const ModelConfig& c = dec->config();
  const SparsePrefillConfig sp = per_head_patterns(static_cast<int>(c.num_layers), static_cast<int>(c.num_heads));
  MethodRunner one(*dec, 1, {&sp, nullptr}), two(*dec, 2, {&sp, nullptr});
  expect_same(one, two, c.vocab_size, "sparse prefill");
  // The patterns drop blocks: the prompt's logits differ from the dense path's.
  MethodRunner dense(*dec, 1, {}), sparse(*dec, 1, {&sp, nullptr});
  std::vector<float> d, s;
  const std::vector<int32_t> prompt = long_prompt(160, static_cast<int>(c.vocab_size));
  dense.run(prompt, 160, 0, d);
  sparse.run(prompt, 160, 0, s);
  EXPECT_GT(max_row_rel_error(s.data(), d.data(), static_cast<int64_t>(d.size()) / c.vocab_size, c.vocab_size), 1e-4);
}

TEST(TensorParallelMethodsCpu, SinkRouterEqualsOneRank) {
  auto dec = LlmDecoder::load(fixture_model_dir("llama_tiny"));  // 4 query heads, 2 KV heads: a group a rank
  const ModelConfig& c = dec->config();
  for (double tau : {-1.0, 0.0}) {
    SinkRouterConfig cfg;
    cfg.c0 = tau;
    cfg.tau_min = -1.0;
    cfg.num_dense_layers = 1;
    cfg.surrogate = tau < 0 ? SinkSurrogate::AnchorValue : SinkSurrogate::Zero;
    MethodRunner one(*dec, 1, {nullptr, &cfg}), two(*dec, 2, {nullptr, &cfg});
    expect_same(one, two, c.vocab_size, tau < 0 ? "SinkRouter tau -1" : "SinkRouter tau 0");
    EXPECT_GT(one.counters().groups_routed, 0);
    EXPECT_EQ(two.counters().groups_routed, one.counters().groups_routed) << "tau " << tau;
    EXPECT_EQ(two.counters().groups_skipped, one.counters().groups_skipped) << "tau " << tau;
    if (tau < 0) EXPECT_EQ(one.counters().groups_skipped, one.counters().groups_routed);
  }
}

TEST(TensorParallelMethodsCpu, LookMEqualsOneRank) {
  auto dec = LlmDecoder::load(fixture_model_dir("llama_tiny"));
  const ModelConfig& c = dec->config();
  for (const char* mode : {"pivot", "text-prior-h2o"}) {
    LookMParams p = *look_m_mode_from_name(mode);
    p.scores = LookMScores::Full;  // every chunk's rows: the scores accumulate across the ranks' chunks
    MethodRunner one(*dec, 1, {nullptr, nullptr, &p}), two(*dec, 2, {nullptr, nullptr, &p});
    expect_same(one, two, c.vocab_size, mode);
    EXPECT_GT(one.compressed_len(), 0) << mode;
    EXPECT_LT(one.compressed_len(), 160) << mode;
    EXPECT_EQ(two.compressed_len(), one.compressed_len()) << mode;
  }
}

TEST(TensorParallelMethodsCpu, LookMRefusesReplicatedKvHeads) {
  auto dec = LlmDecoder::load(fixture_model_dir("qwen3_f32"));  // 1 KV head over 2 ranks: replicated
  const LookMParams p;
  MethodRunner two(*dec, 2, {nullptr, nullptr, &p});
  std::vector<float> rows;
  EXPECT_THROW(two.run(long_prompt(64, static_cast<int>(dec->config().vocab_size)), 64, 1, rows), InternalError);
}

TEST(TensorParallelMethodsCpu, SinkRouterRefusesReplicatedKvHeads) {
  auto dec = LlmDecoder::load(fixture_model_dir("qwen3_f32"));  // 1 KV head over 2 ranks: replicated
  SinkRouterConfig cfg;
  cfg.num_dense_layers = 0;
  MethodRunner two(*dec, 2, {nullptr, &cfg});
  std::vector<float> rows;
  EXPECT_THROW(two.run(long_prompt(40, static_cast<int>(dec->config().vocab_size)), 40, 2, rows), InternalError);
}

}  // namespace
}  // namespace vlm::testing
