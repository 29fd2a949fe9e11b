// tools/common/backend_flags: the backend flags every model-running tool shares, here the KV cache
// dtype's auto rule (vLLM's --kv-cache-dtype auto: the model's dtype): f32 with --dtype float32
// (the exact path end to end), bf16 otherwise; an explicit value wins; a bad one is a usage error.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tools/common/backend_flags.h"

namespace vlm::cli {
namespace {

const FlagParser& parser() {
  static const FlagParser p("tool [flags]", [] {
    FlagTable t;
    add_backend_flags(t);
    return t;
  }());
  return p;
}

DType kv_of(const std::map<std::string, std::string>& flags) {
  EngineConfig c;
  apply_backend_flags(flags, parser(), c);
  return c.kv_dtype;
}

TEST(BackendFlags, KvCacheDtypeAutoFollowsTheDtype) {
  EXPECT_EQ(kv_of({}), DType::BF16);
  EXPECT_EQ(kv_of({{"dtype", "auto"}}), DType::BF16);
  EXPECT_EQ(kv_of({{"dtype", "bfloat16"}}), DType::BF16);
  EXPECT_EQ(kv_of({{"dtype", "float32"}}), DType::F32);
  EXPECT_EQ(kv_of({{"gemm-activations", "f32"}}), DType::F32);
  EXPECT_EQ(kv_of({{"dtype", "float32"}, {"kv-cache-dtype", "auto"}}), DType::F32);
}

TEST(BackendFlags, KvCacheDtypeGivenWins) {
  EXPECT_EQ(kv_of({{"dtype", "float32"}, {"kv-cache-dtype", "bf16"}}), DType::BF16);
  EXPECT_EQ(kv_of({{"kv-cache-dtype", "f32"}}), DType::F32);
  EXPECT_EQ(kv_of({{"kv-cache-dtype", "f16"}}), DType::F16);
  EXPECT_EQ(kv_of({{"kv-cache-dtype", "fp8"}}), DType::F8_E4M3);  // vLLM's names: the GPU's FP8 cache
  EXPECT_EQ(kv_of({{"kv-cache-dtype", "fp8_e4m3"}}), DType::F8_E4M3);
  EXPECT_EXIT(kv_of({{"kv-cache-dtype", "f64"}}), ::testing::ExitedWithCode(2),
              "--kv-cache-dtype must be auto, f32, bf16, f16 or fp8, got 'f64'");
}

// --quantization (vLLM's flag): off unless fp8 is given; anything else is a usage error.
TEST(BackendFlags, QuantizationFp8IsOptIn) {
  auto fp8_of = [](const std::map<std::string, std::string>& flags) {
    EngineConfig c;
    apply_backend_flags(flags, parser(), c);
    return c.quantize_fp8;
  };
  EXPECT_FALSE(fp8_of({}));
  EXPECT_FALSE(fp8_of({{"quantization", "none"}}));
  EXPECT_TRUE(fp8_of({{"quantization", "fp8"}}));
  EXPECT_EXIT(fp8_of({{"quantization", "awq"}}), ::testing::ExitedWithCode(2),
              "--quantization must be none or fp8, got 'awq'");
}

// --load-format (vLLM's names): dummy streams to the GPU (a bounded host budget) and keeps every
// tensor for the CPU backend; another value is a usage error.
TEST(BackendFlags, LoadFormat) {
  auto load_of = [](const std::map<std::string, std::string>& flags) {
    EngineConfig c;
    apply_backend_flags(flags, parser(), c);
    return load_options(flags, parser(), c);
  };
  EXPECT_EQ(load_of({}).format, LoadFormat::Auto);
  EXPECT_EQ(load_of({{"load-format", "safetensors"}}).format, LoadFormat::Safetensors);
  const WeightLoadOptions cpu = load_of({{"load-format", "dummy"}, {"device", "cpu"}});
  EXPECT_EQ(cpu.format, LoadFormat::Dummy);
  EXPECT_LT(cpu.dummy_keep_bytes, 0);  // the CPU layers keep views into every tensor
  const WeightLoadOptions gpu = load_of({{"load-format", "dummy"}, {"device", "cuda"}});
  EXPECT_EQ(gpu.dummy_keep_bytes, kDummyStreamBytes);
  EXPECT_EXIT(load_of({{"load-format", "pt"}}), ::testing::ExitedWithCode(2),
              "--load-format must be auto, safetensors or dummy, got 'pt'");
}

}  // namespace
}  // namespace vlm::cli

namespace vlm::cli {
namespace {

// --tensor-parallel-size N (vLLM's flag; -tp N its short form): 1 by default, at least 1.
TEST(BackendFlags, TensorParallelSizeAndItsShortForm) {
  auto tp_of = [](const std::map<std::string, std::string>& flags) {
    EngineConfig c;
    apply_backend_flags(flags, parser(), c);
    return c.tensor_parallel_size;
  };
  EXPECT_EQ(tp_of({}), 1);
  EXPECT_EQ(tp_of({{"tensor-parallel-size", "2"}}), 2);
  EXPECT_EXIT(tp_of({{"tensor-parallel-size", "0"}}), ::testing::ExitedWithCode(2), "--tensor-parallel-size");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"tool", "-tp", "4"}, std::vector<std::string>{"tool", "-tp=4"},
        std::vector<std::string>{"tool", "--tensor-parallel-size", "4"}}) {
    std::vector<std::string> a = args;
    std::vector<char*> argv;
    for (std::string& s : a) argv.push_back(s.data());
    const std::vector<Flag> flags = parser().parse_list(static_cast<int>(argv.size()), argv.data());
    ASSERT_EQ(flags.size(), 1u) << args[1];
    EXPECT_EQ(flags[0].name, "tensor-parallel-size") << args[1];
    EXPECT_EQ(flags[0].value, "4") << args[1];
  }
}

}  // namespace
}  // namespace vlm::cli
