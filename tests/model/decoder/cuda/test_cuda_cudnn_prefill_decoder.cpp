// The GPU decoder's prefill with cuDNN's fused attention (CudaCudnnPrefill, switched on with
// min_tokens 256 and 512-row buckets so small prompts take it) against the same decoder with it
// switched off (paged_prefill_attention) and the CPU decoder (f32 weights over a bf16 cache), on a
// random Qwen2-shaped model with head size 128 (GQA 2), bf16 on the GPU:
//  - one sequence of 700 tokens in one step (padded to 1024 inside cuDNN);
//  - two first chunks of 600 and 333 tokens in one step (the first one's padding overlaps the
//    second's rows);
//  - a 1000-token prompt in chunks of 600 (first chunk) and 400 (over 600 cached: the K/V
//    gathered from the paged cache, padded to 512 x 1024 inside cuDNN), then one decode step;
//  - a prompt in four chunks (300, 500, 400, 300) over growing cached context;
//  - two sequences of different lengths, first chunks then chunks over different contexts;
//  - chunks beside decode rows (a decode row before and after the chunk in the step) and a chunk
//    too short for cuDNN beside a long one (the built-in kernel runs the leftover sequences).
// Each: the cuDNN path is no farther from the CPU's logits than 1.5x the built-in path's error
// (the bf16 rounding scale) and within that scale of the built-in path; cuDNN ran every layer of
// the steps it covers (and none of the others; the paged ones counted apart). Skips without a
// GPU or without cuDNN 9.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "engine/scheduling/kv_cache.h"
#include "kernels/cuda/attention/cudnn_library.h"
#include "model/decoder/cuda/cuda_decoder.h"
#include "model/layers/cuda/cuda_cudnn_prefill.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {
namespace {

constexpr int kL = 2, kH = 4, kHkv = 2, kV = 512, kB = 16;
constexpr int64_t kBlocks = 256;

class CudnnPrefillDecoder : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    std::string why;
    if (cuda::cudnn_api(&why) == nullptr) GTEST_SKIP() << "cuDNN unavailable: " << why;
    RandomQwen2 m{.hidden = kH * 128, .intermediate = 512, .layers = kL, .heads = kH, .kv_heads = kHkv, .vocab = kV};
    m.seed = 21;
    dir_ = write_random_qwen2("vlm_cudnn_prefill", m);
    host_ = LlmDecoder::load(dir_);
    KVCacheShape shape;
    shape.num_layers = kL;
    shape.num_blocks = kBlocks;
    shape.block_size = kB;
    shape.num_kv_heads = kHkv;
    shape.head_dim = 128;
    shape.dtype = DType::BF16;
    cpu_cache_ = std::make_unique<KVCache>(shape);
    for (int on = 0; on < 2; ++on) {
      CudaDecoderOptions o;
      o.dtype = DType::BF16;
      o.block_size = kB;
      o.num_kv_blocks = kBlocks;
      o.max_tokens_per_step = 1024;
      o.max_logit_rows = 1024;
      o.cudnn_prefill = on;
      o.cudnn_min_tokens = 256;
      o.cudnn_bucket = 512;
      o.max_model_len = kBlocks / 2 * kB;  // the K/V scratch for chunks over cached context
      gpu_[on] = std::make_unique<CudaDecoder>(*host_, o);
    }
    std::vector<int32_t> ids(kBlocks);
    for (int32_t i = 0; i < kBlocks; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    tables_[0].assign(ids.begin(), ids.begin() + kBlocks / 2);
    tables_[1].assign(ids.begin() + kBlocks / 2, ids.end());
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // One step of `lens[s]` tokens of prompts[s] from position starts[s], on the CPU (which = 2) or
  // GPU decoder `which` (0: built-in kernel, 1: cuDNN on); logits of every row.
  std::vector<float> step(int which, const std::vector<std::vector<int32_t>>& prompts, const std::vector<int>& starts,
                          const std::vector<int>& lens) {
    std::vector<SequenceChunk> chunks(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      chunks[s].token_ids = std::span<const int32_t>(prompts[s].data() + starts[s], lens[s]);
      chunks[s].start_pos = starts[s];
      chunks[s].block_table = tables_[s];
      chunks[s].logits = LogitsFor::All;
    }
    ForwardBatch fb = make_forward_batch(chunks, kB);
    std::vector<float> logits;
    if (which == 2) {
      host_->forward(fb, cpu_cache_->layers(), logits);
    } else {
      gpu_[which]->forward(fb);
      gpu_[which]->download_logits(logits);
    }
    return logits;
  }

  // The same steps on all three; checks the logits of each, and that cuDNN ran `cudnn_steps` steps.
  void run_steps(const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::vector<int>>& starts,
                 const std::vector<std::vector<int>>& lens, int cudnn_steps, int paged_steps = 0) {
    const int64_t calls0 = gpu_[1]->cudnn_prefill_calls(), paged0 = gpu_[1]->cudnn_paged_calls();
    for (size_t i = 0; i < starts.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      const auto ours = step(0, prompts, starts[i], lens[i]);
      const auto cudnn = step(1, prompts, starts[i], lens[i]);
      const auto cpu = step(2, prompts, starts[i], lens[i]);
      const int64_t rows = static_cast<int64_t>(ours.size()) / kV;
      const double e_ours = max_row_rel_error(ours.data(), cpu.data(), rows, kV);
      const double e_cudnn = max_row_rel_error(cudnn.data(), cpu.data(), rows, kV);
      const double e_pair = max_row_rel_error(cudnn.data(), ours.data(), rows, kV);
      std::printf("step %zu: rows %lld, vs CPU: built-in %.4g, cuDNN %.4g; cuDNN vs built-in %.4g\n", i,
                  static_cast<long long>(rows), e_ours, e_cudnn, e_pair);
      ASSERT_GT(e_ours, 0.0);
      EXPECT_LT(e_ours, 0.1) << "built-in vs CPU " << e_ours;  // the bf16 path itself is sane
      EXPECT_LE(e_cudnn, 1.5 * e_ours) << "cuDNN vs CPU " << e_cudnn << ", built-in vs CPU " << e_ours;
      EXPECT_LE(e_pair, 1.5 * e_ours) << "cuDNN vs built-in " << e_pair << ", built-in vs CPU " << e_ours;
    }
    EXPECT_EQ(gpu_[1]->cudnn_prefill_calls() - calls0, int64_t(cudnn_steps) * kL);
    EXPECT_EQ(gpu_[1]->cudnn_paged_calls() - paged0, int64_t(paged_steps) * kL);
    EXPECT_EQ(gpu_[0]->cudnn_prefill_calls(), 0);
  }

  static std::vector<int32_t> prompt(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& t : ids) t = static_cast<int32_t>(rng() % kV);
    return ids;
  }

  std::string dir_;
  std::unique_ptr<LlmDecoder> host_;
  std::unique_ptr<KVCache> cpu_cache_;
  std::unique_ptr<CudaDecoder> gpu_[2];
  std::vector<int32_t> tables_[2];
};

TEST_F(CudnnPrefillDecoder, OneSequenceOneStep) { run_steps({prompt(700, 1)}, {{0}}, {{700}}, 1); }

TEST_F(CudnnPrefillDecoder, TwoFirstChunksInOneStep) {
  run_steps({prompt(600, 2), prompt(333, 3)}, {{0, 0}}, {{600, 333}}, 1);
}

TEST_F(CudnnPrefillDecoder, ChunkOverCachedContextThenDecode) {
  // Chunk 1 (600, first: cuDNN), chunk 2 (400 over 600 cached: cuDNN over the gathered K/V), one
  // decode row (built-in).
  // With chunks over cached context through cuDNN off (the default), only chunk 1 takes cuDNN.
  const bool paged = cudnn_paged_prefill_enabled();
  run_steps({prompt(1001, 4)}, {{0}, {600}, {1000}}, {{600}, {400}, {1}}, paged ? 2 : 1, paged ? 1 : 0);
}

TEST_F(CudnnPrefillDecoder, SeveralChunksOverCachedContext) {
  const bool paged = cudnn_paged_prefill_enabled();
  run_steps({prompt(1500, 5)}, {{0}, {300}, {800}, {1200}}, {{300}, {500}, {400}, {300}}, paged ? 4 : 1, paged ? 3 : 0);
}

TEST_F(CudnnPrefillDecoder, TwoSequencesOfDifferentLengthsOverContext) {
  // Step 0: first chunks 600 and 333; step 1: 400 over 1000 and 290 over 623 in one step.
  const bool paged = cudnn_paged_prefill_enabled();
  run_steps({prompt(1000, 6), prompt(623, 7)}, {{0, 0}, {600, 333}}, {{600, 333}, {400, 290}}, paged ? 2 : 1,
            paged ? 1 : 0);
}

TEST_F(CudnnPrefillDecoder, ChunksBesideDecodeRowsAndShortChunks) {
  // Step 0: first chunks (600, 300). Step 1: a decode row of A before B's 400 over 700. Step 2:
  // A's 400 over 1001 before a decode row of B. Step 3: A's 100-row chunk (too short: built-in)
  // beside B's 300 over 1001 (cuDNN).
  run_steps({prompt(1101, 8), prompt(1001, 9)}, {{0, 0}, {600, 300}, {601, 700}, {1001, 701}},
            {{600, 300}, {1, 400}, {400, 1}, {100, 300}}, cudnn_paged_prefill_enabled() ? 4 : 1,
            cudnn_paged_prefill_enabled() ? 3 : 0);
}

}  // namespace
}  // namespace vlm::testing
