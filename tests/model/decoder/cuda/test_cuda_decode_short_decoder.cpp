// The fused short-context decode (CudaDecoderOptions::decode_short, kernels/cuda/attention/
// decode_short.h: RoPE + K/V write + attention in one launch) against the two-kernel path
// (rope_split_q_kv_write then paged_decode_attention), on a random Qwen2-shaped model with head
// size 128 (the fixture models' head sizes take the reference attention kernel, so they never reach
// it), bf16 and f16, as CUDA graphs and eagerly. Two sequences are prefilled to 700 and 1500 tokens,
// then 6 decode steps of both and 4 of the long one alone, fed the same random tokens; the logits
// agree within the bf16/f16 noise of the graphs-vs-eager test (the split sums' f32 order), and the
// switch took effect (layers counted on the fused path; none with it off); with PDL on (the fused
// kernel launched plainly between PDL kernels) the logits are the same bits. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include <cuda_runtime.h>

#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {
namespace {

constexpr int kL = 2, kH = 8, kHkv = 2, kV = 512, kB = 16;
constexpr int64_t kBlocks = 512;

class CudaDecodeShortDecoder : public ::testing::Test {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    RandomQwen2 m{.hidden = kH * 128, .intermediate = 512, .layers = kL, .heads = kH, .kv_heads = kHkv, .vocab = kV};
    m.seed = 31;
    dir_ = write_random_qwen2("vlm_decode_short", m);
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

  std::unique_ptr<CudaDecoder> make(DType dt, bool eager, int short_path, int pdl = 0) const {
    CudaDecoderOptions o;
    o.dtype = dt;
    o.block_size = kB;
    o.num_kv_blocks = kBlocks;
    o.max_tokens_per_step = 1024;
    o.max_logit_rows = 64;
    o.enforce_eager = eager;
    o.cudnn_prefill = 0;  // the built-in prefill kernel in all of them
    o.decode_short = short_path;
    o.pdl = pdl;
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

TEST_F(CudaDecodeShortDecoder, FusedShortDecodeAgreesWithTwoKernelPath) {
  int dev = 0, major = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) GTEST_SKIP() << "the fused path needs sm_90 (thread-block clusters)";
  for (DType dt : {DType::BF16, DType::F16}) {
    for (bool eager : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (eager ? " eager" : " graphs"));
      auto fused = make(dt, eager, 1), plain = make(dt, eager, 0), fused_pdl = make(dt, eager, 1, 1);
      const auto got = run({fused.get(), plain.get(), fused_pdl.get()});
      const int64_t rows = 6 * 2 + 4;
      for (const auto& g : got) ASSERT_EQ(static_cast<int64_t>(g.size()), rows * kV);
      EXPECT_LE(max_row_rel_error(got[0].data(), got[1].data(), rows, kV), 2e-2);
      EXPECT_GT(fused->decode_short_layers(), 0) << "the fused path never ran";
      EXPECT_EQ(plain->decode_short_layers(), 0);
      // Inside a PDL step (the fused kernel launched plainly between PDL kernels): the same bits.
      EXPECT_EQ(std::memcmp(got[0].data(), got[2].data(), got[0].size() * sizeof(float)), 0) << "PDL on vs off";
      if (!eager) {
        EXPECT_GT(fused->graph_launches(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing
