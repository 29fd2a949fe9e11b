// --dtype on the CPU (engine/compute_dtype.h): auto's resolution to the checkpoint's dtype, what an
// Engine switches on for it, and the default path's logit error against the exact path (float32)
// on the bf16-weight fixtures, measured and recorded as a test property.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/compute_dtype.h"
#include "engine/engine.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_internal.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/decoder_harness.h"

namespace vlm::testing {
namespace {

TEST(ComputeDType, AutoResolvesToTheCheckpointDtype) {
  EXPECT_EQ(resolve_dtype(std::nullopt, DType::BF16), DType::BF16);
  EXPECT_EQ(resolve_dtype(std::nullopt, DType::F16), DType::F16);
  EXPECT_EQ(resolve_dtype(std::nullopt, DType::F32), DType::F32);
  EXPECT_EQ(resolve_dtype(DType::F32, DType::BF16), DType::F32);
  EXPECT_FALSE(EngineConfig{}.dtype.has_value());  // the default is auto
}

// Restores the exact path whatever a test switched on.
struct ExactPathAfter {
  ~ExactPathAfter() {
    set_bf16_activations(false);
    set_bf16_attention(false);
  }
};

TEST(ComputeDType, EngineAppliesItsDtype) {
  ExactPathAfter restore;
  EngineConfig c = test_config();
  c.device = Device::Cpu;
  c.dtype.reset();  // auto, bf16 checkpoint: bf16 activations where the CPU can
  auto e = make_engine("qwen2_tiny", c);
  EXPECT_EQ(bf16_activations(), gemm_detail::bf16_dot_supported());
  EXPECT_EQ(bf16_attention(), gemm_detail::bf16_dot_supported());
  c.dtype = DType::F32;
  e = make_engine("qwen2_tiny", c);
  EXPECT_FALSE(bf16_activations());
  EXPECT_FALSE(bf16_attention());
  c.dtype.reset();  // auto, f32 checkpoint: f32 activations
  e = make_engine("llama_linear_f32", c);
  EXPECT_FALSE(bf16_activations());
}

class DefaultDtypeFixture : public ::testing::TestWithParam<std::string> {
 protected:
  // The longest fixture prompt through the exact path (float32) and the default (--dtype auto),
  // `chunk` tokens a step; the max row relative error of the default's logits against the exact ones.
  static double default_vs_exact_error(const std::string& model, int chunk) {
    const Reference ref = load_reference(model);
    const int p = ref.num_prompts() - 1;
    DecoderRunner runner(model, 16, 64);
    TestSequence exact{ref.ids(p)}, fast{ref.ids(p)};
    apply_cpu_dtype(DType::F32);
    runner.prefill(exact, chunk);
    apply_cpu_dtype(resolve_dtype(std::nullopt, runner.decoder().weight_dtype()));
    DecoderRunner runner2(model, 16, 64);
    runner2.prefill(fast, chunk);
    const int64_t V = runner.decoder().config().vocab_size;
    EXPECT_EQ(exact.logits.size(), fast.logits.size());
    const int64_t rows = static_cast<int64_t>(std::min(exact.logits.size(), fast.logits.size())) / V;
    return max_row_rel_error(fast.logits.data(), exact.logits.data(), rows, V);
  }
};

// The default (--dtype auto) against the exact path on the same prompt: prefill logits, the
// longest fixture prompt (a bf16 path for any row count: dot product or GEMV).
TEST_P(DefaultDtypeFixture, PrefillLogitErrorAgainstExactIsMeasured) {
  if (!gemm_detail::bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16: auto runs the exact path here";
  ExactPathAfter restore;
  const double err = default_vs_exact_error(GetParam(), 64);
  RecordProperty("rel_err_vs_exact", std::to_string(err));
  std::printf("[ measured ] %s: --dtype auto vs float32, max row relative logit error %.4g\n", GetParam().c_str(), err);
  EXPECT_LE(err, 5e-2);
  EXPECT_GT(err, 1e-6) << "auto on a bf16 checkpoint should take the bf16 path here";
}

// The same for decode-shaped steps (one row each: the bf16 GEMV path, kernels/gemm/gemv_bf16.cpp):
// the prompt fed one token per step, every step's logits against the exact path's.
TEST_P(DefaultDtypeFixture, DecodeStepLogitErrorAgainstExactIsMeasured) {
  if (!gemm_detail::bf16_dot_supported()) GTEST_SKIP() << "no AVX512-BF16: auto runs the exact path here";
  ExactPathAfter restore;
  const double err = default_vs_exact_error(GetParam(), 1);
  EXPECT_TRUE(uses_bf16_gemv(DType::BF16, 1)) << "the default's one-row steps take the GEMV";
  RecordProperty("decode_rel_err_vs_exact", std::to_string(err));
  std::printf("[ measured ] %s: decode steps, --dtype auto vs float32, max row relative logit error %.4g\n",
              GetParam().c_str(), err);
  EXPECT_LE(err, 5e-2);
  EXPECT_GT(err, 1e-6) << "auto on a bf16 checkpoint should take the bf16 GEMV path here";
}

INSTANTIATE_TEST_SUITE_P(Models, DefaultDtypeFixture, ::testing::Values("llama_tiny", "llama3_tiny", "qwen2_tiny"));

}  // namespace
}  // namespace vlm::testing
