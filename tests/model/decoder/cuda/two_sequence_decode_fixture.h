// The fixture the decode-step tests share (test_cuda_decode_fusion.cpp, test_cuda_decode_short_decoder.cpp):
// a random Qwen2-shaped model with head size 128 (2 layers, 8 / 2 heads, vocab 512: the split-K and
// short decode kernels run; the fixture models' head sizes take the reference attention kernel),
// two sequences on shuffled blocks of a 512-block cache, and run(): both prefilled to 700 and 1500
// tokens in chunks of at most 1000, then 6 decode steps of both (2 rows) and 4 of the long one alone
// (1 row), fed the same random tokens on every decoder. Skips without a GPU (VLM_REQUIRE_GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {

class TwoSequenceDecodeFixture : public ::testing::Test {
 protected:
  static constexpr int kL = 2, kH = 8, kHkv = 2, kV = 512, kB = 16;
  static constexpr int64_t kBlocks = 512;

  // name: the random model's directory prefix.
  explicit TwoSequenceDecodeFixture(const char* name) : name_(name) {}

  void SetUp() override {
    VLM_REQUIRE_GPU();
    RandomQwen2 m{.hidden = kH * 128, .intermediate = 512, .layers = kL, .heads = kH, .kv_heads = kHkv, .vocab = kV};
    m.seed = 31;
    dir_ = write_random_qwen2(name_, m);
    host_ = LlmDecoder::load(dir_);
    std::vector<int32_t> ids(kBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    tables_[0].assign(ids.begin(), ids.begin() + kBlocks / 2);
    tables_[1].assign(ids.begin() + kBlocks / 2, ids.end());
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // The options every decoder of these tests shares (the built-in prefill kernel, no cuDNN).
  CudaDecoderOptions base_options(DType dt, bool eager) const {
    CudaDecoderOptions o;
    o.dtype = dt;
    o.block_size = kB;
    o.num_kv_blocks = kBlocks;
    o.max_tokens_per_step = 1024;
    o.max_logit_rows = 64;
    o.enforce_eager = eager;
    o.cudnn_prefill = 0;
    return o;
  }

  // The same steps on every decoder of ds; returns each one's logits of the decode steps [rows, V].
  std::vector<std::vector<float>> run(const std::vector<CudaDecoder*>& ds) const {
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> tokens(2);
    const int lens[2] = {700, 1500};
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < lens[s]; ++i) tokens[s].push_back(static_cast<int32_t>(rng() % kV));
    std::vector<std::vector<float>> out(ds.size());
    auto forward = [&](const std::vector<SequenceChunk>& chunks, bool keep) {
      const ForwardBatch fb = make_forward_batch(chunks, kB);
      for (size_t i = 0; i < ds.size(); ++i) {
        ds[i]->forward(fb);
        std::vector<float> logits;
        ds[i]->download_logits(logits);
        if (keep) out[i].insert(out[i].end(), logits.begin(), logits.end());
      }
    };
    for (int s = 0; s < 2; ++s)  // prefill in chunks of at most 1000 tokens
      for (int start = 0; start < lens[s]; start += 1000) {
        SequenceChunk c;
        c.token_ids = std::span<const int32_t>(tokens[s].data() + start, std::min(1000, lens[s] - start));
        c.start_pos = start;
        c.block_table = tables_[s];
        forward({c}, false);
      }
    for (int step = 0; step < 10; ++step) {  // 6 steps of both, then 4 of the long one
      std::vector<SequenceChunk> chunks;
      for (int s = step < 6 ? 0 : 1; s < 2; ++s) {
        tokens[s].push_back(static_cast<int32_t>(rng() % kV));
        SequenceChunk c;
        c.token_ids = std::span<const int32_t>(&tokens[s].back(), 1);
        c.start_pos = static_cast<int32_t>(tokens[s].size()) - 1;
        c.block_table = tables_[s];
        chunks.push_back(c);
      }
      forward(chunks, true);
    }
    return out;
  }

  const char* name_;
  std::string dir_;
  std::unique_ptr<LlmDecoder> host_;
  std::vector<int32_t> tables_[2];
};

}  // namespace vlm::testing
