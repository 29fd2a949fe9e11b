// The CUDA StepBackend against the CPU path on a fixture model: the same logits rows (the GPU
// forward's, copied back) sampled by the CPU Sampler and by the GPU sampler give the same tokens,
// logprobs, ranks and top logprobs, and advance each sequence's RNG alike, for greedy, penalties,
// min_tokens masks, temperature, top-k, min-p and seeds; with top-p the GPU token lies in the
// nucleus (it walks the CDF in id order, the CPU most likely first). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <string>

#include "engine/cuda/cuda_backend.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    decoder_ = LlmDecoder::load(fixture_model_dir("qwen2_tiny"));
    CudaDecoderOptions o;
    o.dtype = DType::F32;
    o.num_kv_blocks = 64;
    o.max_tokens_per_step = 512;
    backend_ = std::make_unique<CudaBackend>(*decoder_, o, std::vector<int32_t>{2});
    // Three prompts, logits of their last rows.
    prompts_ = {{5, 9, 33, 7, 100, 3}, {17, 4, 4, 4, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
    std::vector<SequenceChunk> chunks;
    int32_t next_block = 0;
    for (size_t i = 0; i < prompts_.size(); ++i, next_block += 2) {
      tables_.push_back({next_block, next_block + 1});
      SequenceChunk c;
      c.token_ids = prompts_[i];
      c.block_table = tables_[i];
      chunks.push_back(c);
    }
    backend_->forward(make_forward_batch(chunks, 16), EmbeddingOverride{});
    backend_->decoder().download_logits(logits_);
    std::fprintf(stderr, "[ cuda backend ] forward of 3 prompts done\n");
    V_ = decoder_->config().vocab_size;
  }

  Sequence make_seq(size_t prompt, std::vector<int32_t> outputs, const SamplingParams& p, uint64_t seed) const {
    Sequence s(1, prompts_[prompt], p);
    for (int32_t t : outputs) s.token_ids.push_back(t);
    s.rng.seed(seed);
    return s;
  }

  std::unique_ptr<LlmDecoder> decoder_;
  std::unique_ptr<CudaBackend> backend_;
  std::vector<std::vector<int32_t>> prompts_, tables_;
  std::vector<float> logits_;
  int64_t V_ = 0;
};

std::vector<SamplingParams> param_cases() {
  std::vector<SamplingParams> cases;
  SamplingParams p;
  p.temperature = 0;
  cases.push_back(p);  // greedy
  p.repetition_penalty = 1.7f;
  p.frequency_penalty = 0.6f;
  p.presence_penalty = 0.4f;
  cases.push_back(p);  // greedy + penalties
  p.min_tokens = 10;
  p.stop_token_ids = {7, 9};
  p.logprobs = 5;
  cases.push_back(p);  // greedy + penalties + masks + logprobs
  SamplingParams r;
  r.temperature = 0.8f;
  cases.push_back(r);
  r.top_k = 20;
  cases.push_back(r);
  r.min_p = 0.05f;
  r.logprobs = 0;
  cases.push_back(r);
  r.temperature = 1.3f;
  r.top_k = 0;
  r.repetition_penalty = 0.8f;
  r.logprobs = 20;
  cases.push_back(r);
  return cases;
}

TEST_F(CudaBackendTest, GpuSamplingMatchesTheCpuSampler) {
  Sampler cpu(V_, {2});
  const std::vector<int32_t> outputs = {7, 7, 33, 100, 2};
  int case_index = 0;
  for (const SamplingParams& p : param_cases()) {
    for (uint64_t seed : {1u, 99u, 12345u}) {
      std::vector<Sequence> gpu_seqs, cpu_seqs;
      for (size_t i = 0; i < prompts_.size(); ++i) {
        gpu_seqs.push_back(make_seq(i, outputs, p, seed + i));
        cpu_seqs.push_back(make_seq(i, outputs, p, seed + i));
      }
      std::vector<SampleTask> tasks;
      for (size_t i = 0; i < gpu_seqs.size(); ++i) tasks.push_back({&gpu_seqs[i], static_cast<int64_t>(i)});
      tasks.push_back({&gpu_seqs[0], 2});  // two tasks may share a sequence's RNG stream... and rows
      std::vector<SampleResult> got;
      std::fprintf(stderr, "[ cuda backend ] sampling case %d seed %llu\n", case_index,
                   static_cast<unsigned long long>(seed));
      backend_->sample(tasks, got);
      ASSERT_EQ(got.size(), tasks.size());
      std::vector<SampleResult> want;
      for (size_t i = 0; i < cpu_seqs.size(); ++i) want.push_back(cpu.sample(logits_.data() + i * V_, cpu_seqs[i]));
      want.push_back(cpu.sample(logits_.data() + 2 * V_, cpu_seqs[0]));
      for (size_t i = 0; i < tasks.size(); ++i) {
        SCOPED_TRACE("case " + std::to_string(case_index) + " seed " + std::to_string(seed) + " task " + std::to_string(i));
        EXPECT_EQ(got[i].token_id, want[i].token_id);
        ASSERT_EQ(got[i].logprobs.has_value(), want[i].logprobs.has_value());
        if (got[i].logprobs) {
          EXPECT_NEAR(got[i].logprobs->logprob, want[i].logprobs->logprob, 1e-5);
          EXPECT_EQ(got[i].logprobs->rank, want[i].logprobs->rank);
          ASSERT_EQ(got[i].logprobs->top.size(), want[i].logprobs->top.size());
          for (size_t k = 0; k < got[i].logprobs->top.size(); ++k) {
            EXPECT_EQ(got[i].logprobs->top[k].token_id, want[i].logprobs->top[k].token_id);
            EXPECT_NEAR(got[i].logprobs->top[k].logprob, want[i].logprobs->top[k].logprob, 1e-5);
          }
        }
      }
      for (size_t i = 0; i < gpu_seqs.size(); ++i) EXPECT_EQ(gpu_seqs[i].rng(), cpu_seqs[i].rng()) << "RNG stream " << i;
    }
    ++case_index;
  }
}

TEST_F(CudaBackendTest, TopPTokensLieInTheNucleus) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  for (size_t row = 0; row < prompts_.size(); ++row) {
    // The nucleus on the host: most likely first while the mass before is < top_p.
    const float* l = logits_.data() + row * V_;
    const float m = *std::max_element(l, l + V_);
    std::vector<double> pr(V_);
    double total = 0;
    for (int64_t i = 0; i < V_; ++i) total += pr[i] = std::exp(static_cast<double>(l[i] - m));
    std::vector<int32_t> order(V_);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pr[a] > pr[b]; });
    std::vector<uint8_t> in(V_, 0);
    double before = 0;
    for (int32_t t : order) {
      if (before >= p.top_p * total) break;
      in[t] = 1;
      before += pr[t];
    }
    for (uint64_t seed = 0; seed < 50; ++seed) {
      Sequence s = make_seq(row, {}, p, seed);
      const SampleTask task{&s, static_cast<int64_t>(row)};
      std::vector<SampleResult> got;
      backend_->sample(std::span<const SampleTask>(&task, 1), got);
      EXPECT_TRUE(in[got[0].token_id]) << "row " << row << " seed " << seed << " token " << got[0].token_id;
    }
  }
}

}  // namespace
}  // namespace vlm::testing
