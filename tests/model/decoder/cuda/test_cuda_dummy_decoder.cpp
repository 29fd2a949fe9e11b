// --load-format dummy on the GPU decoder: a streaming dummy store (WeightStore::streaming, what the
// GPU tools use: the host holds a budget of made tensors and drops the oldest) gives the GPU the
// same weights as a store that keeps every tensor: the GPU's logits are bit-equal, in bf16 and
// with --quantization fp8 (quantized on the GPU from the made bf16 tensors), with a budget small
// enough that tensors are dropped during the load (a MoE model's fused experts too). And the GPU
// over dummy weights computes what the CPU computes over them (f32 path, close). Skips where no GPU
// is visible (FP8: not Hopper).
#include <gtest/gtest.h>

#include <cstring>

#include "model/decoder/cuda/cuda_decoder.h"
#include "model/decoder/weight_footprint.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

WeightLoadOptions dummy(int64_t keep_bytes) {
  WeightLoadOptions o;
  o.format = LoadFormat::Dummy;
  o.dummy_keep_bytes = keep_bytes;
  return o;
}

struct DummyGpu {
  DummyGpu(const std::string& model, int64_t keep_bytes, DType dtype, bool fp8)
      : runner(model, 16, 64, DType::F32, 7, dummy(keep_bytes)) {
    CudaDecoderOptions o;
    o.dtype = dtype;
    o.block_size = 16;
    o.num_kv_blocks = 64;
    o.max_tokens_per_step = 256;
    o.max_logit_rows = 256;
    o.quantize_fp8 = fp8;
    gpu = std::make_unique<CudaDecoder>(runner.decoder(), o);
    runner.forward_override = [this](const ForwardBatch& fb, std::vector<float>& logits) {
      gpu->forward(fb);
      gpu->download_logits(logits);
    };
  }
  // A prompt prefilled in chunks of 5, then 4 greedy tokens: the logits of every row.
  std::vector<float> logits() {
    TestSequence s;
    s.tokens = {1, 17, 230, 5, 99, 300, 3, 64, 12, 250, 7};  // < 384, the fixtures' vocabulary
    runner.prefill(s, 5);
    runner.greedy(s, 4);
    return s.logits;
  }
  DecoderRunner runner;
  std::unique_ptr<CudaDecoder> gpu;
};

// A budget that holds a layer's tensors but not the model: tensors are dropped while the GPU loads.
// A MoE model (no DecoderFootprint): twice the largest layer's matrices (attention, the router,
// the experts and a dense layer's MLP together bound any one layer).
int64_t small_budget(const std::string& model) {
  const auto d = LlmDecoder::load(fixture_model_dir(model), dummy(0));
  const ModelConfig& c = d->config();
  const int64_t elt = static_cast<int64_t>(dtype_size(d->weight_dtype()));
  const int64_t embed = c.vocab_size * c.hidden_size;
  if (c.moe.enabled()) {
    const int64_t C = c.hidden_size, QD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
    const int64_t layer = (QD + 2 * KD) * C + C * QD + c.moe.num_experts * (3 * c.moe.intermediate_size + 1) * C +
                          3 * c.intermediate_size * C;
    return elt * std::max(embed, 2 * layer);
  }
  const DecoderFootprint f = decoder_footprint(c);
  return elt * std::max(embed, 2 * (f.params() - embed) / std::max<int64_t>(1, c.num_layers));
}

void expect_streamed_equals_held(const std::string& model, DType dtype, bool fp8) {
  const int64_t budget = small_budget(model);
  DummyGpu held(model, -1, dtype, fp8), streamed(model, budget, dtype, fp8);
  const DummyWeights& sw = *streamed.runner.decoder().weights().dummy_weights();
  EXPECT_GT(sw.bytes_made(), budget) << "nothing was dropped: the test does not stream";
  EXPECT_LE(sw.bytes_held(), budget);
  const std::vector<float> a = held.logits(), b = streamed.logits();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << model;
}

TEST(CudaDummyDecoder, StreamedLoadEqualsHeldBf16) {
  VLM_REQUIRE_GPU();
  for (const char* m : {"qwen2_tiny", "llama_tiny", "qwen3_tiny"}) expect_streamed_equals_held(m, DType::BF16, false);
}

// Qwen3-MoE (8 experts, top 2, layer 1 dense): the experts made fused ([E, 2I, C], [E, C, I]) and
// the router, streamed layer by layer.
TEST(CudaDummyDecoder, StreamedMoeLoadEqualsHeldBf16) {
  VLM_REQUIRE_GPU();
  expect_streamed_equals_held("qwen3_moe_tiny", DType::BF16, false);
}

TEST(CudaDummyDecoder, StreamedLoadEqualsHeldFp8) {
  VLM_REQUIRE_GPU();
  cudaDeviceProp p{};
  VLM_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  if (p.major != 9) GTEST_SKIP() << p.name << ": FP8 linear layers run on Hopper (sm_90) only";
  for (const char* m : {"qwen2_tiny", "llama_tiny"}) expect_streamed_equals_held(m, DType::BF16, true);
}

// The f32 GPU path over streamed dummy weights against the CPU over the same (held) weights.
TEST(CudaDummyDecoder, F32GpuMatchesCpuOnDummyWeights) {
  VLM_REQUIRE_GPU();
  for (const char* m : {"qwen2_tiny", "qwen3_tiny", "qwen3_moe_tiny"}) {
    DecoderRunner cpu(m, 16, 64, DType::F32, 7, dummy(-1));
    TestSequence s;
    s.tokens = {1, 17, 230, 5, 99, 300, 3, 64, 12, 250, 7};
    cpu.prefill(s, 5);
    DummyGpu gpu(m, small_budget(m), DType::F32, false);
    TestSequence g;
    g.tokens = s.tokens;
    gpu.runner.prefill(g, 5);
    ASSERT_EQ(s.logits.size(), g.logits.size());
    const int64_t V = cpu.vocab(), rows = static_cast<int64_t>(s.logits.size()) / V;
    const double err = max_row_rel_error(g.logits.data(), s.logits.data(), rows, V);
    std::printf("[ dummy ] %s: f32 GPU vs CPU max row rel logit error %.3g\n", m, err);
    EXPECT_LT(err, 1e-4) << m;
  }
}

}  // namespace
}  // namespace vlm::testing
