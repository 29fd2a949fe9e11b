// LLaVA-OneVision through vlm-server on the GPU (--device cuda, the exact path --dtype float32):
// the GPU fixture's recorded chats (tests/fixtures/llava_onevision_gpu, ov_gpu served with the
// Qwen3 tokenizer) sent over HTTP on 127.0.0.1 as OpenAI messages with data: URLs (images of
// several aspect ratios, two images, a video as a frame list, a mix), the prefill in chunks of 16
// tokens that cut the media runs. Each answers transformers 5.17's greedy tokens, with the sampled
// token's and the top-5 logprobs within 5e-4 of HF f32's (the engine-level GPU test's bound,
// tests/engine/cuda/test_cuda_onevision_engine.cpp; the CPU server on the same fixture,
// OnevisionGpuFixtureServerCpu in test_server, within 1e-4). That the GPU's media encoder takes
// OneVision's items (not the host CPU) is asserted by CudaOnevisionVisionRunner.
// MediaEncoderPicksItAndReservesTiles; the reservation line it logs goes to stdout, which
// ServerProcess discards (an earlier form of this test looked for it in the stderr log and failed
// on the H200 with every chat equal to HF). The server is stopped by its pid. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/gpu_test.h"
#include "tests/support/onevision_fixture.h"
#include "tests/support/onevision_server_chats.h"
#include "tests/support/server_process.h"

namespace vlm::testing {
namespace {

TEST(CudaOnevisionServer, ChatsGiveHfGreedyAndLogprobs) {
  VLM_REQUIRE_GPU();
  ServerProcess s(vlm_binary("vlm-server"),
                  {"--model", onevision_gpu_served_dir(), "--device", "cuda", "--dtype", "float32",
                   "--num-kv-blocks", "128", "--max-model-len", "1024", "--log-level", "info",
                   "--max-video-frames", "6", "--max-num-batched-tokens", "16"},
                  /*ready_timeout_s=*/180);
  const double worst =
      expect_served_onevision_chats_match_hf(s, onevision_gpu_root(), onevision_gpu_model_dir(), 5e-4, "cuda ov_gpu");
  std::printf("[ server ] ov_gpu on the GPU: every chat's logprobs within %.2e of HF f32\n", worst);
  EXPECT_EQ(s.terminate(), 0) << s.log();
}

}  // namespace
}  // namespace vlm::testing
