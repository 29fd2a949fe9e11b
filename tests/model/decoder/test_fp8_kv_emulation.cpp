// The FP8 KV cache's scale policy (model/decoder/kv_cache_scales.h: static per-head scales, 1.0
// without a calibrated checkpoint) measured on the CPU, without a GPU: the fixture models decode
// their prompts one token a step on the exact f32 path, and after every step every cached K/V
// value is replaced by what the GPU's F8_E4M3 cache would hold (e4m3(x / s) * s, kernels/core/fp8.h,
// s = 1.0). Compared with Hugging Face's f32 logits (the largest row's relative logit error and
// the top-1 agreement over all rows) beside the same run without the rounding. The row's own
// key/value is still exact in its own step (the GPU's is rounded too): a slight underestimate.
// The GPU's figures: tests/model/decoder/cuda/test_cuda_fp8_kv_decoder.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernels/core/fp8.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/fp8_checkpoint.h"

namespace vlm::testing {
namespace {

// Every cached value rounded through E4M3 under scale s (idempotent on rounded values).
void round_cache_to_fp8(const KVCache& cache, float s) {
  for (const PagedKVLayer& l : cache.layers())
    for (void* base : {l.k, l.v}) {
      float* x = static_cast<float*>(base);
      const int64_t n = l.num_blocks * l.block_stride();
      for (int64_t i = 0; i < n; ++i)
        if (std::isfinite(x[i])) x[i] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(x[i] * (1.0f / s))) * s;
    }
}

// Every prompt's logits [sum of lengths, V], one token a step, the cache rounded after each step
// when fp8.
std::vector<float> one_token_steps(const std::string& model, const Reference& ref, bool fp8) {
  DecoderRunner r(model, 16, 64, DType::F32);
  std::vector<float> all;
  for (int p = 0; p < ref.num_prompts(); ++p) {
    TestSequence seq;
    seq.tokens = ref.ids(p);
    while (seq.cached < static_cast<int32_t>(seq.tokens.size())) {
      r.step({&seq}, {1});
      if (fp8) round_cache_to_fp8(r.cache(), 1.0f);
    }
    all.insert(all.end(), seq.logits.begin(), seq.logits.end());
  }
  return all;
}

class Fp8KvEmulation : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8KvEmulation, ScaleOneIsCloseToHfF32) {
  const Reference ref = load_reference(GetParam());
  std::vector<float> want;
  for (int p = 0; p < ref.num_prompts(); ++p) {
    const TensorView l = ref.logits(p);
    want.insert(want.end(), l.as<const float>(), l.as<const float>() + l.numel());
  }
  const std::vector<float> exact = one_token_steps(GetParam(), ref, false), fp8 = one_token_steps(GetParam(), ref, true);
  ASSERT_EQ(fp8.size(), want.size());
  int64_t rows = 0;
  for (int p = 0; p < ref.num_prompts(); ++p) rows += static_cast<int64_t>(ref.ids(p).size());
  const int64_t vocab = static_cast<int64_t>(want.size()) / rows;
  const double e_exact = max_row_rel_error(exact.data(), want.data(), rows, vocab);
  const double e_fp8 = max_row_rel_error(fp8.data(), want.data(), rows, vocab);
  const double t_fp8 = top1_agreement(fp8.data(), want.data(), rows, vocab);
  std::printf("[ fp8 kv emulated ] %s: max row rel logit error %.4g (f32 cache %.4g), top-1 %.3f over %lld rows\n",
              GetParam().c_str(), e_fp8, e_exact, t_fp8, static_cast<long long>(rows));
  EXPECT_LE(e_exact, 1e-3);
  EXPECT_LE(e_fp8, 0.5);
  EXPECT_GE(t_fp8, 0.8);
}

INSTANTIATE_TEST_SUITE_P(Models, Fp8KvEmulation, ::testing::Values("llama_tiny", "llama3_tiny", "qwen2_tiny", "qwen3_tiny"));

}  // namespace
}  // namespace vlm::testing
