// The decode step's fusions (CudaDecoderOptions::fused_norm: each RMSNorm folded into the GEMV
// after it; fused_decode_reduce: decode attention's split reduce merged into its split kernel)
// against the unfused launches, on a random Qwen2-shaped model with head size 128 (the split-K
// decode kernel runs; the fixture models' head sizes take the reference attention kernel), bf16
// and f16, as CUDA graphs and eagerly. Two sequences are prefilled to 700 and 1500 tokens (so the
// decode plan has several splits a KV head: the merged reduce's case), then 6 decode steps of
// both (2 rows: the GEMV path) and 4 of the long one alone (1 row), fed the same random tokens.
// The norm fusion gives the same logits bit for bit (hidden 1024 <= 4096); the merged reduce
// agrees within the bf16/f16 noise of the graphs-vs-eager test (it adds the softmax weights in
// another order). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {
namespace {

constexpr int kL = 2, kH = 8, kHkv = 2, kV = 512, kB = 16;
constexpr int64_t kBlocks = 512;

class CudaDecodeFusion : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    RandomQwen2 m{.hidden = kH * 128, .intermediate = 512, .layers = kL, .heads = kH, .kv_heads = kHkv, .vocab = kV};
    m.seed = 31;
    dir_ = write_random_qwen2("vlm_decode_fusion", m);
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

  std::unique_ptr<CudaDecoder> make(DType dt, bool eager, int norm, int reduce) const {
    CudaDecoderOptions o;
    o.dtype = dt;
    o.block_size = kB;
    o.num_kv_blocks = kBlocks;
    o.max_tokens_per_step = 1024;
    o.max_logit_rows = 64;
    o.enforce_eager = eager;
    o.cudnn_prefill = 0;  // the built-in prefill kernel in all of them
    o.fused_norm = norm;
    o.fused_decode_reduce = reduce;
    o.decode_short = 0;  // the split kernel (the fused short-decode path: test_cuda_decode_short_decoder.cpp)
    return std::make_unique<CudaDecoder>(*host_, o);
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

  std::string dir_;
  std::unique_ptr<LlmDecoder> host_;
  std::vector<int32_t> tables_[2];
};

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST_F(CudaDecodeFusion, NormFusionIsExactAndMergedReduceAgrees) {
  for (DType dt : {DType::BF16, DType::F16}) {
    for (bool eager : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (eager ? " eager" : " graphs"));
      // {norm, reduce} fused: both, norm off, reduce off, neither.
      auto both = make(dt, eager, 1, 1), no_norm = make(dt, eager, 0, 1), no_reduce = make(dt, eager, 1, 0),
           neither = make(dt, eager, 0, 0);
      const auto got = run({both.get(), no_norm.get(), no_reduce.get(), neither.get()});
      const int64_t rows = 6 * 2 + 4;
      for (const auto& g : got) ASSERT_EQ(static_cast<int64_t>(g.size()), rows * kV);
      EXPECT_EQ(differing(got[0], got[1]), 0) << "norm fusion, merged reduce";
      EXPECT_EQ(differing(got[2], got[3]), 0) << "norm fusion, reduce kernel";
      EXPECT_LE(max_row_rel_error(got[0].data(), got[2].data(), rows, kV), 2e-2) << "merged reduce, norm fused";
      EXPECT_LE(max_row_rel_error(got[1].data(), got[3].data(), rows, kV), 2e-2) << "merged reduce, norm unfused";
      if (!eager) {
        EXPECT_GT(both->graph_launches(), 0);
      } else {
        EXPECT_EQ(both->graphs_captured(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing
