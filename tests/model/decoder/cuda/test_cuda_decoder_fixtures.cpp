// The GPU decoder against Hugging Face transformers on the committed fixture models, as
// tests/model/decoder/test_decoder_fixtures.cpp checks the CPU one:
//  - exact path (--dtype float32: f32 weights, f32 GEMMs without TF32, f32 KV): prefill logits
//    to 1e-4 relative, chunked prefill (1, 7, 64), greedy continuations token for token, and two
//    sequences sharing every step (prefill chunks mixed with decode rows);
//  - bf16 path: logits at least as close to HF's f32 logits as HF's own bf16 run (error <= 1.5x
//    HF-bf16's), and greedy tokens equal HF bf16's greedy continuation wherever HF's top-2 margin
//    exceeds 0.05 (fed HF's tokens, so one near-tie does not derail the rest; positions where the
//    exact model itself is at a near-tie are counted apart, see the test), where
//    VLM_HF_BF16_DIR holds HF's bf16 run (bench/gpu/hf_bf16_logits.py writes
//    <dir>/<model>.safetensors with p<i>.logits, p<i>.greedy, p<i>.margin); skipped otherwise;
//  - decode steps as CUDA graphs (the default) against the same steps run eagerly: batches
//    padded to their bucket, a context crossing a bucket's end, f32 and bf16.
// The Qwen3-MoE fixtures (8 experts, top 2, layer 1 dense; qwen3_moe_f32_relayout: the experts
// in the other fused layout) run the GPU's MoE layer (model/layers/cuda/cuda_moe.h) through all
// of these, its decode steps inside the graphs.
// Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr double kTol = 1e-4;

// A DecoderRunner whose steps run on the GPU (its own cache of the same block count).
struct GpuRunner {
  GpuRunner(const std::string& model, int block_size, int64_t num_blocks, DType dtype, uint32_t seed = 7,
            bool eager = false, int fused_norm = -1)
      : runner(model, block_size, num_blocks, DType::F32, seed) {
    CudaDecoderOptions o;
    o.dtype = dtype;
    o.block_size = block_size;
    o.num_kv_blocks = num_blocks;
    o.max_tokens_per_step = 512;
    o.max_logit_rows = 512;
    o.enforce_eager = eager;
    o.fused_norm = fused_norm;
    gpu = std::make_unique<CudaDecoder>(runner.decoder(), o);
    runner.forward_override = [this](const ForwardBatch& fb, std::vector<float>& logits) {
      gpu->forward(fb);
      gpu->download_logits(logits);
    };
  }
  DecoderRunner runner;
  std::unique_ptr<CudaDecoder> gpu;
};

class CudaDecoderFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    ref_ = load_reference(GetParam());
  }
  Reference ref_;
};

TEST_P(CudaDecoderFixture, ExactPrefillLogitsMatchHuggingFace) {
  GpuRunner g(GetParam(), 16, 64, DType::F32);
  for (int p = 0; p < ref_.num_prompts(); ++p) {
    TestSequence seq{ref_.ids(p)};
    g.runner.prefill(seq, static_cast<int32_t>(seq.tokens.size()));
    const TensorView want = ref_.logits(p);
    ASSERT_EQ(static_cast<int64_t>(seq.logits.size()), want.numel());
    const double err = max_row_rel_error(seq.logits.data(), want.as<const float>(), want.dim(0), want.dim(1));
    EXPECT_LE(err, kTol) << "prompt " << p << " of " << seq.tokens.size() << " tokens";
    RecordProperty("exact_err_p" + std::to_string(p), std::to_string(err));
    std::printf("[ exact f32 ] %s prompt %d: max row rel error %.3g\n", GetParam().c_str(), p, err);
  }
}

TEST_P(CudaDecoderFixture, ExactChunkedPrefillMatchesHuggingFace) {
  for (int32_t chunk : {1, 7, 64}) {
    GpuRunner g(GetParam(), 16, 64, DType::F32, 100 + chunk);
    for (int p = 0; p < ref_.num_prompts(); ++p) {
      TestSequence seq{ref_.ids(p)};
      g.runner.prefill(seq, chunk);
      const TensorView want = ref_.logits(p);
      const double err = max_row_rel_error(seq.logits.data(), want.as<const float>(), want.dim(0), want.dim(1));
      EXPECT_LE(err, kTol) << "chunk " << chunk << ", prompt " << p;
    }
  }
}

TEST_P(CudaDecoderFixture, ExactGreedyContinuationMatchesHuggingFace) {
  GpuRunner g(GetParam(), 16, 64, DType::F32);
  for (int p = 0; p < ref_.num_prompts(); ++p) {
    TestSequence seq{ref_.ids(p)};
    const std::vector<int32_t> want = ref_.greedy(p);
    EXPECT_EQ(g.runner.greedy(seq, static_cast<int>(want.size())), want) << "prompt " << p;
  }
}

// Two sequences share every step: the longer one prefills in chunks of 24 while the shorter one
// finishes its prompt and decodes, so steps mix prefill and decode rows.
TEST_P(CudaDecoderFixture, ExactMixedBatchMatchesHuggingFace) {
  GpuRunner g(GetParam(), 4, 256, DType::F32);
  const int a_prompt = 1, b_prompt = ref_.num_prompts() - 1;
  TestSequence a{ref_.ids(a_prompt)}, b{ref_.ids(b_prompt)};
  const std::vector<int32_t> a_want = ref_.greedy(a_prompt), b_want = ref_.greedy(b_prompt);
  const int64_t V = g.runner.vocab();
  const size_t a_len = a.tokens.size(), b_len = b.tokens.size();
  while (a.tokens.size() < a_len + a_want.size() || b.tokens.size() < b_len + b_want.size()) {
    std::vector<int32_t> counts(2, 0);
    TestSequence* s[2] = {&a, &b};
    for (int i = 0; i < 2; ++i) {
      const auto uncached = static_cast<int32_t>(s[i]->tokens.size()) - s[i]->cached;
      counts[i] = std::min<int32_t>(uncached, 24);
    }
    g.runner.step({&a, &b}, counts);
    const size_t lens[2] = {a_len, b_len}, wants[2] = {a_want.size(), b_want.size()};
    for (int i = 0; i < 2; ++i) {
      if (s[i]->cached < static_cast<int32_t>(s[i]->tokens.size()) || s[i]->tokens.size() >= lens[i] + wants[i])
        continue;
      const float* last = s[i]->logits.data() + (static_cast<int64_t>(s[i]->cached) - 1) * V;
      s[i]->tokens.push_back(static_cast<int32_t>(std::max_element(last, last + V) - last));
    }
  }
  EXPECT_EQ(std::vector<int32_t>(a.tokens.begin() + static_cast<int64_t>(a_len), a.tokens.end()), a_want);
  EXPECT_EQ(std::vector<int32_t>(b.tokens.begin() + static_cast<int64_t>(b_len), b.tokens.end()), b_want);
  // The prompt rows' logits too (prefill chunks computed beside decode rows).
  const TensorView want = ref_.logits(b_prompt);
  EXPECT_LE(max_row_rel_error(b.logits.data(), want.as<const float>(), want.dim(0), want.dim(1)), kTol);
}

TEST_P(CudaDecoderFixture, Bf16IsAsCloseToHfF32AsHfBf16) {
  const char* dir = std::getenv("VLM_HF_BF16_DIR");
  if (dir == nullptr) GTEST_SKIP() << "VLM_HF_BF16_DIR not set (bench/gpu/hf_bf16_logits.py writes it)";
  const std::string path = std::string(dir) + "/" + GetParam() + ".safetensors";
  if (!std::ifstream(path)) GTEST_SKIP() << "no " << path;
  auto hf = SafetensorsFile::open(path);
  GpuRunner g(GetParam(), 16, 64, DType::BF16);
  const bool moe = g.runner.decoder().config().moe.enabled();
  std::vector<double> ratios;
  double ours_max = 0, theirs_max = 0;
  for (int p = 0; p < ref_.num_prompts(); ++p) {
    TestSequence seq{ref_.ids(p)};
    g.runner.prefill(seq, static_cast<int32_t>(seq.tokens.size()));
    const TensorView want = ref_.logits(p);
    const TensorView hf_bf16 = hf->tensors().at("p" + std::to_string(p) + ".logits");
    ASSERT_EQ(hf_bf16.numel(), want.numel());
    const double ours = max_row_rel_error(seq.logits.data(), want.as<const float>(), want.dim(0), want.dim(1));
    const double theirs = max_row_rel_error(hf_bf16.as<const float>(), want.as<const float>(), want.dim(0), want.dim(1));
    std::printf("[ bf16 ] %s prompt %d: ours %.4g, HF bf16 %.4g (ratio %.2f)\n", GetParam().c_str(), p, ours, theirs,
                ours / theirs);
    ratios.push_back(ours / theirs);
    ours_max = std::max(ours_max, ours);
    theirs_max = std::max(theirs_max, theirs);
    if (!moe) EXPECT_LE(ours, 1.5 * theirs) << "prompt " << p;
  }
  if (moe) {
    // Mixture of experts: top-k routing is discrete, so a hidden state one bf16 rounding away from
    // HF f32's picks another expert at a near-tie and moves its row by O(1): HF bf16 does so itself
    // (H200, 2026-11-29: qwen3_moe_f32 prompt 1 HF bf16 0.49 where ours is 0.018, prompt 3 both 0.99;
    // qwen3_moe_tiny prompt 2 ours 0.22 where HF bf16 is 0.023). Per prompt the comparison says which
    // side flipped, not how precise it is; the rule holds over the prompts: the median ratio and the
    // worst row against HF bf16's worst.
    std::sort(ratios.begin(), ratios.end());
    const double median = ratios[ratios.size() / 2];
    std::printf("[ bf16 ] %s (MoE): median ratio %.2f, worst ours %.4g vs HF bf16 %.4g\n", GetParam().c_str(), median,
                ours_max, theirs_max);
    EXPECT_LE(median, 1.5);
    EXPECT_LE(ours_max, 1.5 * theirs_max);
  }
}

// Fed HF bf16's greedy continuation, our bf16 argmax at each position equals HF's token wherever
// HF's top-2 margin there exceeds 0.05 (the decode steps run as graphs). HF bf16's margin is itself
// bf16-noisy: where HF bf16's tokens so far equal HF f32's greedy continuation (the fixture's
// p<i>.greedy) and HF f32's margin there (p<i>.margin) is <= 0.05, the exact model is at a
// near-tie that bf16 rounding on either side may flip (seen: llama3_tiny prompt 2 token 5, f32
// margin 0.013, HF bf16's 0.078); such positions are counted and printed, not compared.
TEST_P(CudaDecoderFixture, Bf16GreedyMatchesHfBf16WhereItsMarginIsClear) {
  const char* dir = std::getenv("VLM_HF_BF16_DIR");
  if (dir == nullptr) GTEST_SKIP() << "VLM_HF_BF16_DIR not set (bench/gpu/hf_bf16_logits.py writes it)";
  const std::string path = std::string(dir) + "/" + GetParam() + ".safetensors";
  if (!std::ifstream(path)) GTEST_SKIP() << "no " << path;
  auto hf = SafetensorsFile::open(path);
  if (!hf->tensors().count("p0.greedy")) GTEST_SKIP() << path << " has no greedy tokens (older script)";
  GpuRunner g(GetParam(), 16, 64, DType::BF16);
  const int64_t V = g.runner.vocab();
  const bool moe = g.runner.decoder().config().moe.enabled();
  int compared = 0, skipped = 0, exact_ties = 0, moe_flips = 0;
  for (int p = 0; p < ref_.num_prompts(); ++p) {
    const TensorView tok = hf->tensors().at("p" + std::to_string(p) + ".greedy");
    const TensorView margin = hf->tensors().at("p" + std::to_string(p) + ".margin");
    ASSERT_EQ(tok.numel(), margin.numel());
    const std::vector<int32_t> prompt = ref_.ids(p), f32_greedy = ref_.greedy(p);
    const TensorView f32_margin = ref_.file->tensors().at("p" + std::to_string(p) + ".margin");
    TestSequence seq{prompt};
    const int64_t n = tok.numel();
    int64_t same_prefix = 0;  // HF bf16's tokens [0, same_prefix) equal HF f32's
    while (same_prefix < n && same_prefix < static_cast<int64_t>(f32_greedy.size()) &&
           tok.as<const int32_t>()[same_prefix] == f32_greedy[static_cast<size_t>(same_prefix)])
      ++same_prefix;
    for (int64_t k = 0; k < n; ++k) seq.tokens.push_back(tok.as<const int32_t>()[k]);
    g.runner.step({&seq}, {static_cast<int32_t>(prompt.size())});
    for (int64_t k = 0; k + 1 < n; ++k) g.runner.step({&seq}, {1});
    for (int64_t k = 0; k < n; ++k) {
      const float* row = seq.logits.data() + (static_cast<int64_t>(prompt.size()) - 1 + k) * V;
      const auto ours = static_cast<int32_t>(std::max_element(row, row + V) - row);
      if (margin.as<const float>()[k] <= 0.05f) {
        ++skipped;
        continue;
      }
      if (k <= same_prefix && k < f32_margin.numel() && f32_margin.as<const float>()[k] <= 0.05f) {
        ++exact_ties;
        std::printf("[ bf16 greedy ] %s prompt %d token %ld: HF f32 margin %.3f (near-tie), HF bf16 %d (margin %.3f), "
                    "ours %d\n", GetParam().c_str(), p, static_cast<long>(k), f32_margin.as<const float>()[k],
                    tok.as<const int32_t>()[k], margin.as<const float>()[k], ours);
        continue;
      }
      ++compared;
      if (moe) {  // a routing flip (see Bf16IsAsCloseToHfF32AsHfBf16) moves a row past any margin: counted
        if (ours != tok.as<const int32_t>()[k]) {
          ++moe_flips;
          std::printf("[ bf16 greedy ] %s prompt %d token %ld: ours %d, HF bf16 %d (margin %.3f)\n", GetParam().c_str(),
                      p, static_cast<long>(k), ours, tok.as<const int32_t>()[k], margin.as<const float>()[k]);
        }
        continue;
      }
      EXPECT_EQ(ours, tok.as<const int32_t>()[k]) << "prompt " << p << ", token " << k << ", HF margin "
                                                  << margin.as<const float>()[k];
    }
  }
  std::printf("[ bf16 greedy ] %s: %d tokens compared, %d with HF bf16 margin <= 0.05 skipped, %d at HF f32 "
              "near-ties, %d MoE routing flips\n", GetParam().c_str(), compared, skipped, exact_ties, moe_flips);
  EXPECT_GT(compared, 0);
  // MoE: at most 1 in 10 compared tokens differ (H200, 2026-11-29: 4 of 86 on qwen3_moe_f32, 0 on qwen3_moe_tiny).
  EXPECT_LE(10 * moe_flips, compared);
}

// Decode steps of 1, 3 and 5 sequences (5 pads to 8) with graphs against the same steps run
// eagerly; one sequence starts at 250 tokens, so its context crosses the 256-token bucket.
TEST_P(CudaDecoderFixture, DecodeGraphsMatchEagerSteps) {
  for (DType dt : {DType::F32, DType::BF16}) {
    GpuRunner graphs(GetParam(), 16, 256, dt, 7, false), eager(GetParam(), 16, 256, dt, 7, true);
    const int64_t V = graphs.runner.vocab();
    for (int nseq : {1, 3, 5}) {
      std::vector<TestSequence> a, b;
      for (int i = 0; i < nseq; ++i) {
        std::vector<int32_t> prompt = ref_.ids(i % ref_.num_prompts());
        if (i == 1) {  // a long one: 250 tokens
          std::mt19937 rng(3);
          while (prompt.size() < 250) prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(V)));
        }
        a.push_back(TestSequence{prompt});
        b.push_back(TestSequence{prompt});
      }
      for (int i = 0; i < nseq; ++i) {
        graphs.runner.prefill(a[i], 64);
        eager.runner.prefill(b[i], 64);
      }
      std::vector<TestSequence*> pa, pb;
      for (int i = 0; i < nseq; ++i) {
        pa.push_back(&a[i]);
        pb.push_back(&b[i]);
      }
      for (int step = 0; step < 10; ++step) {
        for (int i = 0; i < nseq; ++i) {  // both feed the eager run's greedy token
          const float* last = b[i].logits.data() + (static_cast<int64_t>(b[i].cached) - 1) * V;
          const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
          a[i].tokens.push_back(next);
          b[i].tokens.push_back(next);
        }
        graphs.runner.step(pa, std::vector<int32_t>(nseq, 1));
        eager.runner.step(pb, std::vector<int32_t>(nseq, 1));
      }
      for (int i = 0; i < nseq; ++i) {
        const int64_t rows = b[i].cached, first = rows - 10;
        const double err = max_row_rel_error(a[i].logits.data() + first * V, b[i].logits.data() + first * V, 10, V);
        EXPECT_LE(err, dt == DType::F32 ? 1e-5 : 2e-2) << dtype_name(dt) << ", " << nseq << " sequences, seq " << i;
      }
    }
    EXPECT_GT(graphs.gpu->graph_launches(), 0);
    EXPECT_GE(graphs.gpu->graphs_captured(), 4);  // buckets 1, 3 and 8, and 3 or 8 again past 256
    EXPECT_EQ(eager.gpu->graphs_captured(), 0);
  }
}

// The RMSNorms folded into the decode GEMVs (CudaDecoderOptions::fused_norm, gemv_norm.h) give
// the same logits bit for bit as rms_norm then the GEMV (hidden sizes <= 4096): prefill (64-row
// chunks, unfused in both) then 8 decode steps of 1, 3 and 5 sequences (5 pads to 8: unfused
// too), as graphs and eagerly, bf16 and f16.
TEST_P(CudaDecoderFixture, FusedNormDecodeEqualsUnfused) {
  for (DType dt : {DType::BF16, DType::F16}) {
    for (bool eager : {false, true}) {
      GpuRunner fused(GetParam(), 16, 256, dt, 7, eager, 1), plain(GetParam(), 16, 256, dt, 7, eager, 0);
      const int64_t V = plain.runner.vocab();
      for (int nseq : {1, 3, 5}) {
        std::vector<TestSequence> a, b;
        for (int i = 0; i < nseq; ++i) {
          a.push_back(TestSequence{ref_.ids(i % ref_.num_prompts())});
          b.push_back(TestSequence{ref_.ids(i % ref_.num_prompts())});
          fused.runner.prefill(a.back(), 64);
          plain.runner.prefill(b.back(), 64);
        }
        std::vector<TestSequence*> pa, pb;
        for (int i = 0; i < nseq; ++i) {
          pa.push_back(&a[i]);
          pb.push_back(&b[i]);
        }
        for (int step = 0; step < 8; ++step) {
          for (int i = 0; i < nseq; ++i) {  // both feed the unfused run's greedy token
            const float* last = b[i].logits.data() + (static_cast<int64_t>(b[i].cached) - 1) * V;
            const auto next = static_cast<int32_t>(std::max_element(last, last + V) - last);
            a[i].tokens.push_back(next);
            b[i].tokens.push_back(next);
          }
          fused.runner.step(pa, std::vector<int32_t>(nseq, 1));
          plain.runner.step(pb, std::vector<int32_t>(nseq, 1));
        }
        for (int i = 0; i < nseq; ++i) {
          ASSERT_EQ(a[i].logits.size(), b[i].logits.size());
          int64_t differ = 0;
          double worst = 0;
          for (size_t k = 0; k < a[i].logits.size(); ++k) {
            differ += std::memcmp(&a[i].logits[k], &b[i].logits[k], sizeof(float)) != 0;
            worst = std::max(worst, std::abs(static_cast<double>(a[i].logits[k]) - b[i].logits[k]));
          }
          EXPECT_EQ(differ, 0) << dtype_name(dt) << (eager ? " eager" : " graphs") << ", " << nseq
                               << " sequences, seq " << i << ": max |difference| " << worst;
        }
      }
      if (!eager) {
        EXPECT_GT(fused.gpu->graph_launches(), 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaDecoderFixture,
                         ::testing::Values("llama_tiny", "llama3_tiny", "llama_linear_f32", "qwen2_tiny",
                                           "qwen2_yarn_f16", "qwen3_tiny", "qwen3_f32", "qwen3_moe_tiny",
                                           "qwen3_moe_f32", "qwen3_moe_f32_relayout"));

}  // namespace
}  // namespace vlm::testing
