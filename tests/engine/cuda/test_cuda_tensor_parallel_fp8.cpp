// FP8 linear layers under tensor parallelism on two GPUs (issues 42 and 43): --quantization fp8 on
// bf16 fixtures, and FP8 checkpoints (per-channel scales; block scales at block 16), each on a
// CudaBackend split over GPUs 0 and 1 against the same backend on one GPU. Column-parallel layers
// take their rows with their per-output-channel scales (the same FP8 bytes as TP=1);
// row-parallel ones (o, down) take columns: a per-channel checkpoint keeps every output scale (the
// same bytes); --quantization fp8 and block-scaled checkpoints quantize each rank's columns per
// output channel over those columns (scales <= TP=1's: each weight rounded at most as coarsely),
// and the GEMM paths quantize each rank's slice of the activations per token. So TP=2 and TP=1 are
// two FP8 roundings of the same bf16 model: their logits differ by at most about the sum of their
// distances to the bf16 model. Bound: err(TP=2 FP8, TP=1 FP8) <= 2 x err(TP=1 FP8, TP=1 bf16) +
// 3e-2 (the bf16 TP test's closeness, for the all-reduce's order), and TP=2 as close to the bf16
// model as TP=1 is (err(TP=2 FP8, bf16) <= 1.5 x err(TP=1 FP8, bf16) + 3e-2). Skips below two GPUs, without NCCL, or without FP8 tensor
// cores (Hopper).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <vector>

#include <unistd.h>

#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/core/nccl_communicator.h"
#include "model/layers/cuda/cuda_fp8_linear.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/fp8_checkpoint.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

namespace fs = std::filesystem;

struct Fp8TpRunner {
  Fp8TpRunner(const std::string& model, bool quantize, int tp) : runner(model, 16, 64) {
    CudaDecoderOptions o;
    o.dtype = DType::BF16;
    o.block_size = 16;
    o.num_kv_blocks = 64;
    o.max_tokens_per_step = 512;
    o.max_logit_rows = 512;
    o.quantize_fp8 = quantize;
    backend = std::make_unique<CudaBackend>(runner.decoder(), o, std::vector<int32_t>{}, nullptr,
                                            tp > 1 ? std::make_unique<CudaRankGroup>(tp) : nullptr);
    runner.forward_override = [this](const ForwardBatch& fb, std::vector<float>& logits) {
      backend->forward(fb, EmbeddingOverride{});
      backend->decoder().download_logits(logits);
    };
  }
  DecoderRunner runner;
  std::unique_ptr<CudaBackend> backend;
};

struct Fp8Case {
  std::string model;
  std::string format;  // "quantize" (--quantization fp8), "channel", "block16"
};

class CudaTensorParallelFp8 : public ::testing::TestWithParam<Fp8Case> {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (cuda::visible_gpus() < 2) GTEST_SKIP() << "tensor parallelism needs two GPUs";
    std::string why;
    if (cuda::nccl_api(&why) == nullptr) GTEST_SKIP() << "NCCL not found: " << why;
    try {
      require_fp8_gpu(0, "the test");
    } catch (const LoadError& e) {
      GTEST_SKIP() << e.what();
    }
    dir_ = fs::temp_directory_path() / ("vlm_tp_fp8_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// Prefill logits of every reference prompt in chunks of 7.
struct Fp8Run {
  std::vector<float> logits;
  int64_t vocab = 0;
};
Fp8Run run_all(Fp8TpRunner& r, const Reference& ref) {
  Fp8Run out;
  out.vocab = r.runner.vocab();
  for (int p = 0; p < ref.num_prompts(); ++p) {
    TestSequence s{ref.ids(p)};
    r.runner.prefill(s, 7);
    out.logits.insert(out.logits.end(), s.logits.begin(), s.logits.end());
  }
  return out;
}

TEST_P(CudaTensorParallelFp8, TwoGpusMatchOneWithinTheFp8Bound) {
  const Fp8Case& c = GetParam();
  const Reference ref = load_reference(c.model);
  const bool quantize = c.format == "quantize";
  const std::string model =
      quantize ? c.model
               : write_fp8_checkpoint(fixture_model_dir(c.model), (dir_ / c.format).string(),
                                      c.format == "channel" ? Fp8Scales::Channel : Fp8Scales::Block, 16);
  Fp8Run bf16;
  {
    Fp8TpRunner base(c.model, false, 1);
    bf16 = run_all(base, ref);
  }
  Fp8Run one, two;
  {
    Fp8TpRunner r(model, quantize, 1);
    one = run_all(r, ref);
  }
  {
    Fp8TpRunner r(model, quantize, 2);
    two = run_all(r, ref);
  }
  const int64_t V = one.vocab;
  ASSERT_EQ(one.logits.size(), two.logits.size());
  const int64_t rows = static_cast<int64_t>(one.logits.size()) / V;
  const double e1 = max_row_rel_error(one.logits.data(), bf16.logits.data(), rows, V);
  const double e12 = max_row_rel_error(two.logits.data(), one.logits.data(), rows, V);
  std::printf("[ tp2 fp8 %s ] %s: TP=1 FP8 vs bf16 %.3g, TP=2 FP8 vs TP=1 FP8 %.3g\n", c.format.c_str(),
              c.model.c_str(), e1, e12);
  EXPECT_LE(e12, 2 * e1 + 3e-2);
  // TP=2 is as good an FP8 rounding of the model as TP=1: each rank scales its activations per token over
  // its own columns (and, quantizing at load, its o/down weights per channel over its own columns), so the
  // two are different roundings, not the same bytes; greedy tokens are not compared (on two H200s, session
  // 18 call C, the tiny fixtures' FP8 error is 0.32-0.59 and first tokens with a 0.1 margin differed).
  const double e2 = max_row_rel_error(two.logits.data(), bf16.logits.data(), rows, V);
  std::printf("[ tp2 fp8 %s ] %s: TP=2 FP8 vs bf16 %.3g\n", c.format.c_str(), c.model.c_str(), e2);
  EXPECT_LE(e2, 1.5 * e1 + 3e-2);
}

// K % 16 == 0 for every rank's FP8 layer (qwen2_tiny's MLP of 176 splits into 88: not FP8-able).
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallelFp8,
                         ::testing::Values(Fp8Case{"llama_tiny", "quantize"}, Fp8Case{"qwen3_tiny", "quantize"},
                                           Fp8Case{"llama_tiny", "channel"}, Fp8Case{"llama_tiny", "block16"},
                                           Fp8Case{"qwen3_tiny", "channel"}),
                         [](const auto& info) { return info.param.model + "_" + info.param.format; });

}  // namespace
}  // namespace vlm::testing
