// Tensor parallelism with media on the GPUs (issue 42, round 2): the Qwen2-VL / Qwen2.5-VL
// fixture chats (an image; a video; two images and a video) through the engine at
// --tensor-parallel-size 2 on the exact path (float32), the media encoded by a tower on each GPU
// (EngineConfig::mm_encoder_devices 0, the default, and 2: the same on two GPUs) or by GPU 0's
// tower with the rows copied to GPU 1 (1), eagerly or lazily frame by frame (media_step_patches
// 0 / 1), against the same engine on one GPU: the greedy tokens equal (and equal HF's), every
// sampled token's logprob and top-5 logprobs within 1e-4 (the TP decoder tests' f32 tolerance).
// The engines leave the caller's current device as they found it, and a one-GPU engine built and
// run with GPU 1 current (what a destroyed TP engine used to leave behind, session 17's "invalid
// resource handle": its tower went to GPU 1, its decoder to GPU 0) gives the same results.
// Skips below two GPUs or without NCCL.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/core/cuda_device_guard.h"
#include "kernels/cuda/core/nccl_communicator.h"
#include "tests/engine/cuda/qwen2vl_gpu_prompts.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct MediaCase {
  std::string model;
  int mm_encoder_devices;
  int64_t media_step_patches;
};

class CudaTensorParallelMedia : public ::testing::TestWithParam<MediaCase> {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    if (cuda::visible_gpus() < 2) GTEST_SKIP() << "tensor parallelism needs two GPUs";
    std::string why;
    if (cuda::nccl_api(&why) == nullptr) GTEST_SKIP() << "NCCL not found: " << why;
  }
};

// The fixture prompts batched (chunks of 64 tokens cut the media runs), with logprobs; the engine
// built, run and destroyed with `device` current, which it must leave current.
std::map<std::string, RequestResult> run_prompts(const MediaCase& c, int tp, int device = 0) {
  VLM_CUDA_CHECK(cudaSetDevice(device));
  std::map<std::string, RequestResult> out;
  {
    EngineConfig config = gpu_config(16, 128, 64);
    config.tensor_parallel_size = tp;
    config.mm_encoder_devices = c.mm_encoder_devices;
    config.media_step_patches = c.media_step_patches;
    auto engine = qwen_engine(c.model, config);
    EXPECT_EQ(cuda::current_device(), device) << "TP=" << tp << ": building the engine moved the current device";
    EXPECT_TRUE(engine->backend().encodes_media()) << "TP=" << tp << ": media did not go to the GPU encoder";
    if (tp > 1) {
      EXPECT_NE(engine->backend().device().find("tensor parallel"), std::string::npos) << engine->backend().device();
    }
    std::vector<Submission> subs;
    for (QwenPrompt& q : qwen_prompts(c.model)) {
      q.request.params.logprobs = 5;
      subs.push_back({static_cast<int>(subs.size()), q.request});
    }
    out = run_engine(*engine, subs);
    EXPECT_EQ(cuda::current_device(), device) << "TP=" << tp << ": a step moved the current device";
  }
  EXPECT_EQ(cuda::current_device(), device) << "TP=" << tp << ": destroying the engine moved the current device";
  VLM_CUDA_CHECK(cudaSetDevice(0));
  return out;
}

// Tokens equal HF's on `a` and equal between a and b; logprobs and top-5 within 1e-4.
void expect_same_results(const MediaCase& c, const std::map<std::string, RequestResult>& one,
                         const std::map<std::string, RequestResult>& two, const char* what) {
  for (const QwenPrompt& q : qwen_prompts(c.model)) {
    const std::string& id = q.request.id;
    const RequestResult &a = one.at(id), &b = two.at(id);
    ASSERT_TRUE(a.done && b.done) << id;
    ASSERT_FALSE(a.error) << id << ": " << a.error->message;
    ASSERT_FALSE(b.error) << id << ": " << b.error->message;
    EXPECT_EQ(a.choices.at(0).tokens, q.greedy) << id << ": TP=1 differs from Hugging Face";
    EXPECT_EQ(b.choices.at(0).tokens, a.choices.at(0).tokens) << id << ": " << what << " differs from TP=1";
    const auto &la = a.choices.at(0).logprobs, &lb = b.choices.at(0).logprobs;
    ASSERT_EQ(la.size(), lb.size()) << id;
    double worst = 0;
    for (size_t t = 0; t < la.size(); ++t) {
      worst = std::max(worst, double(std::fabs(la[t].logprob - lb[t].logprob)));
      ASSERT_EQ(la[t].top.size(), lb[t].top.size()) << id << " token " << t;
      for (size_t k = 0; k < la[t].top.size(); ++k) {
        EXPECT_EQ(la[t].top[k].token_id, lb[t].top[k].token_id) << id << " token " << t << " top " << k;
        worst = std::max(worst, double(std::fabs(la[t].top[k].logprob - lb[t].top[k].logprob)));
      }
    }
    EXPECT_LE(worst, 1e-4) << id;
    std::printf("[ %s ] %s %s mm_encoder_devices %d step_patches %lld: max |logprob - TP1| %.3g\n", what,
                c.model.c_str(), id.c_str(), c.mm_encoder_devices, static_cast<long long>(c.media_step_patches), worst);
  }
}

TEST_P(CudaTensorParallelMedia, TwoGpusGiveTheTokensAndLogprobsOfOne) {
  const MediaCase& c = GetParam();
  expect_same_results(c, run_prompts(c, 1), run_prompts(c, 2), "tp2 media");
}

// The engines leave GPU 1 current when they found it so, and a one-GPU engine built and run with
// GPU 1 current (its decoder on GPU 0) equals the one built with GPU 0 current.
TEST_P(CudaTensorParallelMedia, EnginesBuiltWithGpu1CurrentGiveTheSameResults) {
  const MediaCase& c = GetParam();
  const auto ref = run_prompts(c, 1, 0);
  expect_same_results(c, ref, run_prompts(c, 2, 1), "tp2 media, GPU 1 current");
  expect_same_results(c, ref, run_prompts(c, 1, 1), "tp1 media, GPU 1 current");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTensorParallelMedia,
                         ::testing::Values(MediaCase{"qwen2_vl_tiny", 0, 0}, MediaCase{"qwen2_vl_tiny", 0, 1},
                                           MediaCase{"qwen2_5_vl_tiny", 0, 1}, MediaCase{"qwen2_vl_tiny", 1, 0},
                                           MediaCase{"qwen2_vl_tiny", 1, 1}, MediaCase{"qwen2_5_vl_tiny", 1, 1},
                                           MediaCase{"qwen2_vl_tiny", 2, 0}, MediaCase{"qwen2_vl_tiny", 2, 1},
                                           MediaCase{"qwen2_5_vl_tiny", 2, 1}),
                         [](const auto& info) {
                           return info.param.model + "_enc" + std::to_string(info.param.mm_encoder_devices) + "_step" +
                                  std::to_string(info.param.media_step_patches);
                         });

}  // namespace
}  // namespace vlm::testing
