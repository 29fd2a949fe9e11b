// Programmatic dependent launch of the decode step (CudaDecoderOptions::pdl, kernels/cuda/core/pdl.h)
// against plain launches: the same prefill and decode steps give the same logits bit for bit with
// PDL on and off, as CUDA graphs and eagerly, bf16 and f16. Two models:
//  - a random Qwen2 shape with head size 128 (the split-K decode kernel runs, its merged reduce
//    and, with fused_decode_reduce off, its reduce kernel; the RMSNorm-fused GEMVs and, with
//    fused_norm off, rms_norm then the plain GEMVs);
//  - the qwen3_tiny fixture (head size 32: Qwen3's q/k norm fused into the RoPE + KV write kernel,
//    the reference attention kernel launched plainly between PDL kernels).
// Five sequences of different lengths are prefilled, then 4 decode steps of all five (5 rows: a
// graph pads them to 8, past the GEMVs' 4 rows, so cuBLAS products sit between PDL kernels), 4 of
// two and 4 of one, fed the same random tokens. On a GPU that runs PDL (Hopper or later) the PDL
// decoder must have made PDL launches. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "kernels/cuda/core/pdl.h"
#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_qwen2.h"

namespace vlm::testing {
namespace {

constexpr int kB = 16, kSeqs = 5;
constexpr int64_t kBlocks = 640;  // 128 per sequence

class CudaDecodePdl : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (GetParam() == "random_qwen2_d128") {
      RandomQwen2 m{.hidden = 8 * 128, .intermediate = 512, .layers = 2, .heads = 8, .kv_heads = 2, .vocab = 512};
      m.seed = 37;
      dir_ = write_random_qwen2("vlm_decode_pdl", m);
      host_ = LlmDecoder::load(dir_);
      lens_ = {700, 1500, 40, 300, 90};
    } else {
      host_ = LlmDecoder::load(fixture_model_dir(GetParam()));
      lens_ = {300, 450, 40, 200, 90};  // below the fixture's 512 positions with the 12 steps
    }
    std::vector<int32_t> ids(kBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
    for (int s = 0; s < kSeqs; ++s)
      tables_[s].assign(ids.begin() + s * kBlocks / kSeqs, ids.begin() + (s + 1) * kBlocks / kSeqs);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<CudaDecoder> make(DType dt, bool eager, int pdl, int norm, int reduce) const {
    CudaDecoderOptions o;
    o.dtype = dt;
    o.block_size = kB;
    o.num_kv_blocks = kBlocks;
    o.max_tokens_per_step = 1024;
    o.max_logit_rows = 64;
    o.enforce_eager = eager;
    o.cudnn_prefill = 0;
    o.fused_norm = norm;
    o.fused_decode_reduce = reduce;
    o.pdl = pdl;
    o.decode_short = 0;  // the split kernel (the fused short-decode path: test_cuda_decode_short_decoder.cpp)
    return std::make_unique<CudaDecoder>(*host_, o);
  }

  // The same steps on every decoder of ds; returns each one's logits of the decode steps [rows, V].
  std::vector<std::vector<float>> run(const std::vector<CudaDecoder*>& ds) const {
    const int64_t V = host_->config().vocab_size;
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> tokens(kSeqs);
    for (int s = 0; s < kSeqs; ++s)
      for (int i = 0; i < lens_[s]; ++i) tokens[s].push_back(static_cast<int32_t>(rng() % V));
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
    for (int s = 0; s < kSeqs; ++s)  // prefill in chunks of at most 1000 tokens
      for (int start = 0; start < lens_[s]; start += 1000) {
        SequenceChunk c;
        c.token_ids = std::span<const int32_t>(tokens[s].data() + start, std::min(1000, lens_[s] - start));
        c.start_pos = start;
        c.block_table = tables_[s];
        forward({c}, false);
      }
    for (int step = 0; step < 12; ++step) {  // 4 steps of all five, 4 of the last two, 4 of the last one
      std::vector<SequenceChunk> chunks;
      for (int s = step < 4 ? 0 : (step < 8 ? kSeqs - 2 : kSeqs - 1); s < kSeqs; ++s) {
        tokens[s].push_back(static_cast<int32_t>(rng() % V));
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
  std::vector<int> lens_;
  std::vector<int32_t> tables_[kSeqs];
};

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST_P(CudaDecodePdl, PdlLogitsEqualPlainLaunches) {
  int dev = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  const int64_t rows = 4 * kSeqs + 4 * 2 + 4 * 1;
  const int64_t V = host_->config().vocab_size;
  for (DType dt : {DType::BF16, DType::F16}) {
    for (bool eager : {false, true}) {
      SCOPED_TRACE(::testing::Message() << GetParam() << ", " << dtype_name(dt) << (eager ? " eager" : " graphs"));
      // {pdl on, off} with both fusions, then with neither (rms_norm + plain GEMVs, the reduce kernel).
      auto on = make(dt, eager, 1, 1, 1), off = make(dt, eager, 0, 1, 1), on_unfused = make(dt, eager, 1, 0, 0),
           off_unfused = make(dt, eager, 0, 0, 0);
      EXPECT_FALSE(off->pdl());
      if (major >= 9) {
        EXPECT_TRUE(on->pdl()) << "a Hopper-class GPU: PDL must be on when asked for (pdl_supported)";
      } else {
        std::printf("[ pdl ] compute capability %d: PDL not supported, plain launches compared\n", major);
      }
      const int64_t before = cuda::pdl_launches();
      const auto got = run({on.get(), off.get(), on_unfused.get(), off_unfused.get()});
      for (const auto& g : got) ASSERT_EQ(static_cast<int64_t>(g.size()), rows * V);
      EXPECT_EQ(differing(got[0], got[1]), 0) << "fused norm and reduce";
      EXPECT_EQ(differing(got[2], got[3]), 0) << "unfused";
      if (on->pdl()) {
        EXPECT_GT(cuda::pdl_launches(), before);
      } else {
        EXPECT_EQ(cuda::pdl_launches(), before);
      }
      if (!eager) {
        EXPECT_GT(on->graph_launches(), 0);
        EXPECT_GT(on->graphs_captured(), 0);
      } else {
        EXPECT_EQ(on->graphs_captured(), 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaDecodePdl, ::testing::Values("random_qwen2_d128", "qwen3_tiny"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace vlm::testing
