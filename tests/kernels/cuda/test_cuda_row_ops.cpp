// The GPU's row kernels (kernels/cuda/ops/row_ops_cuda.h) against their references: the bilinear
// resize (one block per pixel) against its naive twin (a thread per value) and the CPU's
// bilinear_resize (kernels/ops/vision_ops.h) over a table of shapes (up, down, 1 x 1, one row or
// column, OneVision's 2x pooling of odd grids and its shrink): f32 bit for bit with the CPU (the
// same f32 operations, no FMA on either side), bf16 equal to the naive twin and within bf16's
// rounding of the CPU over the rounded inputs; copy_rows against a host loop, exactly, across dtypes;
// add_rows_at (DeepStack's plane added at the media rows) against its naive twin and a host loop,
// bit for bit (one f32 add per value), on the float4 path, the scalar path and an odd stride.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/ops/row_ops_cuda.h"
#include "kernels/ops/vision_ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct Shape2 {
  int64_t h, w, oh, ow, C;
};

std::vector<float> run_bilinear(const std::vector<float>& in, const Shape2& s, DType dt, bool naive) {
  const auto raw = encode(in, dt);
  cuda::DeviceBuffer din(raw.size()), dout(static_cast<size_t>(s.oh * s.ow * s.C) * dtype_size(dt));
  VLM_CUDA_CHECK(cudaMemcpy(din.get(), raw.data(), raw.size(), cudaMemcpyHostToDevice));
  (naive ? cuda::bilinear_resize_naive : cuda::bilinear_resize)(din.get(), dt, s.h, s.w, s.C, s.oh, s.ow, dout.get(),
                                                                nullptr);
  return decode(to_host<uint8_t>(dout, dout.bytes()), dt);
}

TEST(CudaBilinear, MatchesNaiveAndTheCpu) {
  VLM_REQUIRE_GPU();
  const std::vector<Shape2> shapes = {{4, 4, 8, 8, 16},   {8, 8, 4, 4, 16},    {27, 27, 14, 14, 40}, {1, 1, 3, 2, 5},
                                      {1, 7, 1, 3, 9},    {6, 1, 4, 1, 3},     {5, 3, 5, 3, 1030},   {24, 40, 17, 29, 8},
                                      {3, 3, 1, 1, 1152}, {2, 5, 7, 11, 2}};
  for (const Shape2& s : shapes) {
    const std::vector<float> in = random_vector(static_cast<size_t>(s.h * s.w * s.C), 17);
    const std::string what = std::to_string(s.h) + "x" + std::to_string(s.w) + " -> " + std::to_string(s.oh) + "x" +
                             std::to_string(s.ow) + " of " + std::to_string(s.C);
    for (DType dt : {DType::F32, DType::BF16}) {
      const std::vector<float> ref_in = round_to(in, dt);
      std::vector<float> cpu(static_cast<size_t>(s.oh * s.ow * s.C));
      bilinear_resize(ref_in.data(), s.h, s.w, s.C, s.oh, s.ow, cpu.data());
      const std::vector<float> fast = run_bilinear(in, s, dt, false), naive = run_bilinear(in, s, dt, true);
      ASSERT_EQ(fast.size(), cpu.size()) << what;
      EXPECT_EQ(std::memcmp(fast.data(), naive.data(), fast.size() * 4), 0) << what << " " << dtype_name(dt);
      if (dt == DType::F32)
        EXPECT_EQ(std::memcmp(fast.data(), cpu.data(), fast.size() * 4), 0) << what << " (f32 bit for bit with the CPU)";
      else
        EXPECT_LE(rel_error(fast, cpu), 1e-2) << what << " bf16";
    }
  }
}

TEST(CudaCopyRows, MatchesAHostLoop) {
  VLM_REQUIRE_GPU();
  const int64_t C = 37, rows = 9;
  const std::vector<float> src = random_vector(static_cast<size_t>(rows * C), 3);
  const std::vector<int32_t> from{8, 0, 3, 3}, to{1, 6, 0, 4};
  for (DType sdt : {DType::F32, DType::BF16})
    for (DType ddt : {DType::F32, DType::BF16})
      for (bool identity : {false, true}) {
        const auto raw = encode(src, sdt);
        cuda::DeviceBuffer dsrc(raw.size()), dfrom = to_device(from), dto = to_device(to);
        VLM_CUDA_CHECK(cudaMemcpy(dsrc.get(), raw.data(), raw.size(), cudaMemcpyHostToDevice));
        const std::vector<float> init(static_cast<size_t>(7 * C), -5.0f);
        const auto init_raw = encode(init, ddt);
        cuda::DeviceBuffer ddst(init_raw.size());
        VLM_CUDA_CHECK(cudaMemcpy(ddst.get(), init_raw.data(), init_raw.size(), cudaMemcpyHostToDevice));
        cuda::copy_rows(dsrc.get(), sdt, identity ? nullptr : dfrom.as<int32_t>(), ddst.get(), ddt, dto.as<int32_t>(),
                        static_cast<int64_t>(to.size()), C, nullptr);
        std::vector<float> want = round_to(init, ddt);
        const std::vector<float> s_rounded = round_to(src, sdt);
        for (size_t j = 0; j < to.size(); ++j)
          for (int64_t c = 0; c < C; ++c)
            want[static_cast<size_t>(to[j] * C + c)] =
                s_rounded[static_cast<size_t>((identity ? static_cast<int32_t>(j) : from[j]) * C + c)];
        want = round_to(want, ddt);
        EXPECT_EQ(decode(to_host<uint8_t>(ddst, ddst.bytes()), ddt), want)
            << dtype_name(sdt) << " -> " << dtype_name(ddt) << (identity ? " (rows in order)" : "");
      }
}

// Plane p of media rows [M, planes * C] added into x [T, C] at rows `at`, as add_override_plane does.
TEST(CudaAddRowsAt, MatchesNaiveAndAHostLoop) {
  VLM_REQUIRE_GPU();
  struct Case {
    int64_t C, stride, offset;  // offset: the plane's first column within a row
  };
  // float4 path (C, stride, offset multiples of 4), scalar path (odd C), unaligned plane offset.
  for (const Case& k : {Case{64, 3 * 64, 64}, Case{37, 3 * 37, 2 * 37}, Case{1032, 2 * 1032, 1032}, Case{8, 21, 5}}) {
    const int64_t T = 11;
    const std::vector<int32_t> at{9, 0, 4, 5, 10};
    const auto M = static_cast<int64_t>(at.size());
    const std::vector<float> src = random_vector(static_cast<size_t>(M * k.stride), 5);
    const std::vector<float> x0 = random_vector(static_cast<size_t>(T * k.C), 6);
    std::vector<float> want = x0;
    for (int64_t j = 0; j < M; ++j)
      for (int64_t c = 0; c < k.C; ++c)
        want[static_cast<size_t>(at[static_cast<size_t>(j)] * k.C + c)] += src[static_cast<size_t>(j * k.stride + k.offset + c)];
    const std::string what = "C " + std::to_string(k.C) + " stride " + std::to_string(k.stride) + " offset " +
                             std::to_string(k.offset);
    for (bool naive : {false, true}) {
      cuda::DeviceBuffer dsrc = to_device(src), dx = to_device(x0), dat = to_device(at);
      (naive ? cuda::add_rows_at_naive : cuda::add_rows_at)(dsrc.as<float>() + k.offset, k.stride, dat.as<int32_t>(), M,
                                                            k.C, dx.as<float>(), nullptr);
      const std::vector<float> got = to_host<float>(dx, want.size());
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what << (naive ? " (naive)" : "");
    }
  }
}

}  // namespace
}  // namespace vlm::testing
