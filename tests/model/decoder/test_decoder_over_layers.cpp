// The decoder written over layers (model/arch/llama_decoder.h on the CPU layers) against the
// loop it replaced (tests/support/llm_decoder_loop.h): the same kernels in the same order, so
// the logits must be equal bit for bit — every fixture model, whole and chunked prefill, greedy
// decode steps, two sequences per batch, f32 and bf16 activations, sparse prefill on.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/llm_decoder_loop.h"

namespace vlm::testing {
namespace {

struct Pair {
  DecoderRunner layers, loop;
  explicit Pair(const std::string& model) : layers(model, 16, 96), loop(model, 16, 96) {
    loop.forward_override = [this](const ForwardBatch& b, std::vector<float>& logits) {
      llm_decoder_loop(loop.decoder(), b, loop.cache().layers(), logits);
    };
  }
};

void expect_bit_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
}

class DecoderOverLayers : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderOverLayers, EqualsTheLoopBitForBit) {
  const Reference ref = load_reference(GetParam());
  for (bool bf16 : {false, true}) {
    if (bf16 && !cpu_has_avx512_bf16()) continue;
    set_bf16_activations(bf16);
    for (int32_t chunk : {1 << 20, 7, 1}) {
      Pair p(GetParam());
      for (int i = 0; i < ref.num_prompts(); ++i) {
        TestSequence a{ref.ids(i)}, b{ref.ids(i)};
        p.layers.prefill(a, chunk);
        p.loop.prefill(b, chunk);
        p.layers.greedy(a, 4);
        p.loop.greedy(b, 4);
        expect_bit_equal(a.logits, b.logits, GetParam() + " prompt " + std::to_string(i) + " chunk " +
                                                 std::to_string(chunk) + (bf16 ? " bf16" : " f32"));
        EXPECT_EQ(a.tokens, b.tokens);
      }
    }
    // Two sequences in one batch, then their decode steps together.
    Pair p(GetParam());
    TestSequence a0{ref.ids(0)}, a1{ref.ids(ref.num_prompts() - 1)}, b0 = a0, b1 = a1;
    p.layers.step({&a0, &a1}, {static_cast<int32_t>(a0.tokens.size()), static_cast<int32_t>(a1.tokens.size())});
    p.loop.step({&b0, &b1}, {static_cast<int32_t>(b0.tokens.size()), static_cast<int32_t>(b1.tokens.size())});
    expect_bit_equal(a0.logits, b0.logits, "batched 0");
    expect_bit_equal(a1.logits, b1.logits, "batched 1");
  }
  set_bf16_activations(false);
}

TEST(DecoderOverLayersSparse, EqualsTheLoopWithSparsePrefill) {
  const Reference ref = load_reference("qwen2_tiny");
  SparsePrefillConfig cfg;
  cfg.method = SparsePrefillMethod::AShape;
  cfg.min_prompt_len = 0;
  cfg.n_init = 4;
  cfg.n_local = 8;
  Pair p("qwen2_tiny");
  p.layers.sparse_prefill = cfg;
  p.loop.sparse_prefill = cfg;
  for (int i = 0; i < ref.num_prompts(); ++i) {
    TestSequence a{ref.ids(i)}, b{ref.ids(i)};
    p.layers.prefill(a, 5);
    p.loop.prefill(b, 5);
    expect_bit_equal(a.logits, b.logits, "sparse prompt " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderOverLayers,
                         ::testing::Values("llama_tiny", "llama3_tiny", "llama_linear_f32", "qwen2_tiny",
                                           "qwen2_yarn_f16"));

}  // namespace
}  // namespace vlm::testing
