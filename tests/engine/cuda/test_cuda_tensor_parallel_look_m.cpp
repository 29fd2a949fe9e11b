// LOOK-M under tensor parallelism on two GPUs (issue 42, item 3): a CudaBackend split over GPUs
// 0 and 1 (each rank scores, selects, merges and compacts its own KV heads: CudaLookMStep) against
// the same backend on one GPU. One 160-token prompt with an image span, prefilled in chunks of 32
// with LOOK-M's "full" scores and the default budget (10 % recent + 10 % important: 32 of 160
// tokens kept, so tokens really drop), then greedy decode steps reading the compacted cache.
// f32 (the exact path, llama_tiny: 2 KV heads, one per rank): the compressed length equal, every
// layer's and KV head's scores within 1e-4 relative of TP=1's and the kept sets chosen from them
// (select_kept_tokens, which the GPU's look_m_select_kept equals exactly: test_cuda_look_m.cpp)
// equal, the logits of every step within 1e-4 relative and the greedy tokens equal. bf16
// (qwen2_tiny): the compressed length equal, at least 90 % of the kept positions shared (bf16's
// rounding of the split layers moves near-ties) and the prefill logits within bf16's 3e-2.
// Skips below two GPUs or without NCCL.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/core/nccl_communicator.h"
#include "kernels/kv_compression/look_m_params.h"
#include "kernels/kv_compression/token_selection.h"
#include "model/methods/look_m_state.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr int kBlock = 16;
constexpr int kPrompt = 160;

// One sequence with LOOK-M through a CudaBackend over `tp` GPUs: prefill in chunks of 32 (the
// state's host scores asked for), then greedy decode at positions past the compacted prompt.
class LookMGpuRunner {
 public:
  LookMGpuRunner(const LlmDecoder& dec, DType dtype, int tp) {
    CudaDecoderOptions o;
    o.dtype = dtype;
    o.block_size = kBlock;
    o.num_kv_blocks = 64;
    o.max_tokens_per_step = 512;
    o.max_logit_rows = 512;
    backend_ = std::make_unique<CudaBackend>(dec, o, std::vector<int32_t>{}, nullptr,
                                             tp > 1 ? std::make_unique<CudaRankGroup>(tp) : nullptr);
    for (int i = 0; i < 64; ++i) blocks_.push_back((i * 37) % 64);  // non-contiguous
  }

  // rows: every step's last logits row ([steps, V]); returns the greedy tokens after the prompt.
  std::vector<int32_t> run(const LookMParams& p, std::vector<int32_t> tokens, int decode, int64_t layers,
                           int64_t kv_heads, std::vector<float>& rows) {
    std::vector<ModalityTag> tags(static_cast<size_t>(kPrompt));  // an image span inside the prompt
    for (int j = 16; j < kPrompt - 24; ++j) tags[static_cast<size_t>(j)] = {Modality::Image, 0};
    state_ = std::make_unique<LookMState>(p, static_cast<int>(layers), static_cast<int>(kv_heads), kPrompt, tags);
    state_->host_scores();  // the GPU copies its scores here at the end of prefill (every rank its heads)
    while (cached_ < kPrompt) {
      const int n = std::min(32, kPrompt - cached_);
      rows_.push_back(feed(tokens, n, cached_ + n == kPrompt));
    }
    shift_ = kPrompt - state_->compressed_len;  // the cache keeps compressed_len slots
    cached_ = state_->compressed_len;
    std::vector<int32_t> out;
    for (int i = 0; i < decode; ++i) {
      const std::vector<float>& last = rows_.back();
      const auto t = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      out.push_back(t);
      tokens.resize(static_cast<size_t>(cached_ + shift_));
      tokens.push_back(t);
      rows_.push_back(feed(tokens, 1, false));
    }
    for (const std::vector<float>& r : rows_) rows.insert(rows.end(), r.begin(), r.end());
    return out;
  }
  const LookMState& state() const { return *state_; }
  CudaBackend& backend() { return *backend_; }

 private:
  std::vector<float> feed(const std::vector<int32_t>& tokens, int n, bool finishes_prefill) {
    SequenceChunk ch;
    ch.token_ids = std::span<const int32_t>(tokens.data() + cached_ + shift_, static_cast<size_t>(n));
    ch.start_pos = cached_;
    ch.block_table = std::span<const int32_t>(blocks_.data(), static_cast<size_t>((cached_ + n + kBlock - 1) / kBlock));
    ch.finishes_prefill = finishes_prefill;
    ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&ch, 1), kBlock);
    for (int32_t& pos : fb.positions) pos += shift_;  // logical positions past a compacted prompt
    if (n > 1) fb.look_m = {state_.get()};
    backend_->forward(fb, EmbeddingOverride{});
    std::vector<float> logits;
    backend_->decoder().download_logits(logits);
    cached_ += n;
    return logits;
  }

  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<LookMState> state_;
  std::vector<int32_t> blocks_;
  std::vector<std::vector<float>> rows_;
  int cached_ = 0;  // cache slots in use
  int shift_ = 0;   // logical position - cache slot (LOOK-M's evicted tokens)
};

std::vector<int32_t> long_prompt(int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(kPrompt));
  for (int i = 0; i < kPrompt; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 131 + 7) % vocab);
  return t;
}

// Every layer's and KV head's kept set, chosen from the state's host scores as the GPU chooses.
std::vector<std::vector<int32_t>> kept_sets(const LookMState& st) {
  std::vector<std::vector<int32_t>> out;
  const LookMBudget budget = look_m_budget(st.params, st.prefill_len);
  for (int i = 0; i < st.num_layers * st.num_kv_heads; ++i)
    out.push_back(select_kept_tokens(st.scores.data() + static_cast<size_t>(i) * st.prefill_len, st.is_text.data(),
                                     st.prefill_len, st.params, budget));
  return out;
}

struct Case {
  std::string model;
  DType dtype;
  const char* mode;
};

class CudaTensorParallelLookM : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (cuda::visible_gpus() < 2) GTEST_SKIP() << "tensor parallelism needs two GPUs";
    std::string why;
    if (cuda::nccl_api(&why) == nullptr) GTEST_SKIP() << "NCCL not found: " << why;
  }
};

TEST_P(CudaTensorParallelLookM, TwoGpusKeepTheTokensOfOne) {
  const Case& c = GetParam();
  const bool exact = c.dtype == DType::F32;
  auto dec = LlmDecoder::load(fixture_model_dir(c.model));
  const ModelConfig& m = dec->config();
  ASSERT_EQ(m.num_kv_heads % 2, 0) << "the KV heads must split over the two ranks";
  LookMParams p = *look_m_mode_from_name(c.mode);
  p.scores = LookMScores::Full;  // every chunk's rows
  LookMGpuRunner one(*dec, c.dtype, 1), two(*dec, c.dtype, 2);
  ASSERT_TRUE(one.backend().runs_look_m());
  ASSERT_TRUE(two.backend().runs_look_m());
  const int64_t V = m.vocab_size;
  std::vector<float> a, b;
  const std::vector<int32_t> prompt = long_prompt(V);
  const std::vector<int32_t> ga = one.run(p, prompt, 6, m.num_layers, m.num_kv_heads, a);
  const std::vector<int32_t> gb = two.run(p, prompt, 6, m.num_layers, m.num_kv_heads, b);

  const LookMState &s1 = one.state(), &s2 = two.state();
  EXPECT_GT(s1.compressed_len, 0) << c.mode;
  EXPECT_LT(s1.compressed_len, kPrompt) << c.mode << ": the budget must drop tokens";
  EXPECT_EQ(s2.compressed_len, s1.compressed_len) << c.mode;
  // Both ranks' heads arrived: no score row is left all zero (every head sees every prompt token).
  const size_t L = static_cast<size_t>(kPrompt);
  for (size_t i = 0; i < s2.scores.size() / L; ++i) {
    const auto* row = s2.scores.data() + i * L;
    EXPECT_TRUE(std::any_of(row, row + L, [](float x) { return x != 0.0f; })) << "TP=2 score row " << i << " empty";
  }
  const auto k1 = kept_sets(s1), k2 = kept_sets(s2);
  ASSERT_EQ(k1.size(), k2.size());
  if (exact) {
    double worst = 0;
    for (size_t i = 0; i < s1.scores.size() / L; ++i) {
      double peak = 0, diff = 0;
      for (size_t j = 0; j < L; ++j) {
        peak = std::max(peak, std::abs(static_cast<double>(s1.scores[i * L + j])));
        diff = std::max(diff, std::abs(static_cast<double>(s2.scores[i * L + j]) - s1.scores[i * L + j]));
      }
      worst = std::max(worst, diff / std::max(peak, 1e-30));
    }
    EXPECT_LE(worst, 1e-4) << c.mode << ": scores vs TP=1";
    for (size_t i = 0; i < k1.size(); ++i) EXPECT_EQ(k2[i], k1[i]) << c.mode << ": layer-head " << i << "'s kept set";
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LE(max_row_rel_error(b.data(), a.data(), static_cast<int64_t>(a.size()) / V, V), 1e-4) << c.mode;
    EXPECT_EQ(gb, ga) << c.mode;
  } else {
    size_t shared = 0, total = 0;
    for (size_t i = 0; i < k1.size(); ++i) {
      std::vector<int32_t> both;
      std::set_intersection(k1[i].begin(), k1[i].end(), k2[i].begin(), k2[i].end(), std::back_inserter(both));
      shared += both.size();
      total += k1[i].size();
    }
    EXPECT_GE(static_cast<double>(shared), 0.9 * static_cast<double>(total)) << c.mode << ": kept positions shared";
    const int64_t prefill_rows = (kPrompt + 31) / 32;  // the rows before any compaction
    EXPECT_LE(max_row_rel_error(b.data(), a.data(), prefill_rows, V), 3e-2) << c.mode;
  }
  std::printf("[ tp2 look-m %s %s %s ] compressed %d of %d; greedy %s\n", c.model.c_str(), dtype_name(c.dtype), c.mode,
              s2.compressed_len, kPrompt, ga == gb ? "equal" : "differs");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallelLookM,
                         ::testing::Values(Case{"llama_tiny", DType::F32, "pivot"},
                                           Case{"llama_tiny", DType::F32, "text-prior-h2o"},
                                           Case{"qwen2_tiny", DType::F32, "text-prior-pivot"},
                                           Case{"qwen2_tiny", DType::BF16, "text-prior-pivot"}),
                         [](const auto& info) {
                           std::string mode = info.param.mode;
                           std::replace(mode.begin(), mode.end(), '-', '_');
                           return info.param.model + "_" + dtype_name(info.param.dtype) + "_" + mode;
                         });

}  // namespace
}  // namespace vlm::testing
