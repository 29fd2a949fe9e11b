// CudaVisionCudnn (the vision towers' equal-segment attention through cuDNN) against
// varlen_attention_naive (the f32 reference of varlen_attention.h) on the towers' layout: q, k, v
// read in place from a fused projection [T, 3, H, D], out [T, H, D]: Qwen2-VL's head dim 80 with
// several equal segments (video frames), D 64 with one segment, bf16 and f16; the switch
// (VLM_CUDA_VISION_CUDNN=0, mode 0) and what it declines (F32, D 84). Skips where no GPU is
// visible or cuDNN 9 cannot be loaded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/attention/cudnn_library.h"
#include "kernels/cuda/attention/varlen_attention.h"
#include "model/vision/cuda/cuda_vision_cudnn.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct VisionAttnCase {
  int segments, len, H, D;
  DType dt;
};

TEST(CudaVisionCudnn, EqualSegmentsMatchNaiveReference) {
  VLM_REQUIRE_GPU();
  std::string why;
  if (cuda::cudnn_api(&why) == nullptr) GTEST_SKIP() << "cuDNN unavailable: " << why;
  CudaVisionCudnn att(1);
  int64_t expected_calls = 0;
  uint32_t seed = 1;
  for (const VisionAttnCase& c : {VisionAttnCase{4, 196, 4, 80, DType::BF16}, VisionAttnCase{3, 64, 2, 80, DType::F16},
                                  VisionAttnCase{1, 300, 3, 64, DType::BF16}}) {
    SCOPED_TRACE(std::to_string(c.segments) + " segments of " + std::to_string(c.len) + ", H " + std::to_string(c.H) +
                 ", D " + std::to_string(c.D) + " " + dtype_name(c.dt));
    const int64_t T = int64_t(c.segments) * c.len, C = int64_t(c.H) * c.D;
    const auto qkv = encode(random_vector(size_t(T * 3 * C), seed++), c.dt);  // [T, 3, H, D]
    std::vector<int32_t> cu(size_t(c.segments) + 1);
    for (int s = 0; s <= c.segments; ++s) cu[size_t(s)] = s * c.len;
    auto d_qkv = to_device(qkv), d_cu = to_device(cu);
    const size_t e = dtype_size(c.dt), out_bytes = size_t(T * C) * e;
    cuda::DeviceBuffer got(out_bytes), ref(out_bytes);
    const char* p = d_qkv.as<char>();
    const float scale = 1.0f / std::sqrt(float(c.D));
    cuda::varlen_attention_naive(p, p + C * e, p + 2 * C * e, 3 * C, c.dt, c.H, c.D, d_cu.as<int32_t>(), c.segments,
                                 c.len, scale, ref.get(), nullptr);
    ASSERT_TRUE(att.attention(p, p + C * e, p + 2 * C * e, 3 * C, c.dt, c.H, c.D, c.segments, c.len, scale, got.get(),
                              nullptr))
        << "cuDNN declined or failed (its plan log is in the warning above)";
    ++expected_calls;
    const auto g = decode(to_host<uint8_t>(got, out_bytes), c.dt), r = decode(to_host<uint8_t>(ref, out_bytes), c.dt);
    const double err = normalized_error(g, r);
    // The bf16 closeness of the other attention tests (2e-2 for inputs + 8e-3 for the output).
    EXPECT_LE(err, c.dt == DType::BF16 ? 2.8e-2 : 1.2e-2) << "normalized error " << err;
  }
  EXPECT_EQ(att.calls(), expected_calls);
}

TEST(CudaVisionCudnn, SwitchAndDeclines) {
  setenv("VLM_CUDA_VISION_CUDNN", "0", 1);
  CudaVisionCudnn off;
  unsetenv("VLM_CUDA_VISION_CUDNN");
  CudaVisionCudnn on;
  EXPECT_FALSE(off.enabled());
  EXPECT_TRUE(on.enabled());
  // Declined before touching the GPU: off, F32, a head dim that is not a multiple of 8.
  EXPECT_FALSE(off.attention(nullptr, nullptr, nullptr, 240, DType::BF16, 3, 80, 2, 16, 1.f, nullptr, nullptr));
  EXPECT_FALSE(on.attention(nullptr, nullptr, nullptr, 240, DType::F32, 3, 80, 2, 16, 1.f, nullptr, nullptr));
  EXPECT_FALSE(on.attention(nullptr, nullptr, nullptr, 252, DType::BF16, 3, 84, 2, 16, 1.f, nullptr, nullptr));
  EXPECT_EQ(on.calls() + off.calls(), 0);
}

}  // namespace
}  // namespace vlm::testing
