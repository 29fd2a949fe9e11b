// rope_split_q_kv_write (kernels/cuda/attention) against its two-kernel reference,
// cuda::rope_split_qkv then paged_kv_write (each tested against the CPU in test_cuda_ops.cpp and
// test_cuda_attention.cpp): q and both caches byte-equal, shuffled slots with a skipped token,
// full and partial rotary dims; with Qwen3's q/k norm fused in, against head_rms_norm in place
// then the two kernels; into an FP8 cache (per-head scales) too. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct RopeKvCase {
  int64_t T, H, Hkv, D, R, B;
};

// Fills a cache of num_blocks blocks with 0xff (NaN) so an unwritten slot shows. F8_E4M3: scales
// [Hkv] f32 (device) set as its k_scale and v_scale.
PagedKVLayer poisoned_cache(cuda::DeviceBuffer& k, cuda::DeviceBuffer& v, const RopeKvCase& c, int64_t num_blocks,
                            DType dt, const float* scales = nullptr) {
  PagedKVLayer kv;
  kv.dtype = dt;
  kv.k_scale = kv.v_scale = scales;
  kv.num_blocks = num_blocks;
  kv.block_size = static_cast<int>(c.B);
  kv.num_kv_heads = static_cast<int>(c.Hkv);
  kv.head_dim = static_cast<int>(c.D);
  const size_t bytes = static_cast<size_t>(num_blocks * kv.block_stride()) * dtype_size(dt);
  k.resize(bytes);
  v.resize(bytes);
  VLM_CUDA_CHECK(cudaMemset(k.get(), 0xff, bytes));
  VLM_CUDA_CHECK(cudaMemset(v.get(), 0xff, bytes));
  kv.k = k.get();
  kv.v = v.get();
  return kv;
}

// The fused call (with or without the q/k norm) against its unfused reference, byte for byte.
void expect_fused_equals_unfused(bool with_norm) {
  // (activations, cache): 16-bit caches of the activations' type, and an FP8 one.
  for (const auto& types : {std::pair{DType::BF16, DType::BF16}, std::pair{DType::F16, DType::F16},
                            std::pair{DType::BF16, DType::F8_E4M3}}) {
    const DType dt = types.first, cache = types.second;
    for (const RopeKvCase& c : {RopeKvCase{37, 4, 2, 128, 128, 16}, RopeKvCase{21, 7, 1, 64, 32, 32},
                                RopeKvCase{5, 2, 1, 256, 256, 16}}) {
      const int64_t W = c.H + 2 * c.Hkv, num_blocks = (c.T + c.B - 1) / c.B + 2;
      const auto qkv = round_to(random_vector(c.T * W * c.D, 11), dt);
      const auto table = random_vector(c.T * c.R, 12);  // any cos | sin values: the arithmetic is compared
      std::vector<int32_t> slots(static_cast<size_t>(num_blocks * c.B));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), std::mt19937(13));
      slots.resize(static_cast<size_t>(c.T));
      slots[3] = -1;  // a skipped token
      auto d_qkv = to_device(encode(qkv, dt));
      auto d_qkv_ref = to_device(encode(qkv, dt));  // normalized in place for the reference
      const auto qw = random_vector(c.D, 14), kw = random_vector(c.D, 15);
      auto d_qw = to_device(qw), d_kw = to_device(kw);
      cuda::HeadNorm norm;
      if (with_norm) {
        norm.q_w = d_qw.as<float>();
        norm.k_w = d_kw.as<float>();
        norm.eps = 1e-6f;
        ASSERT_TRUE(cuda::rope_kv_write_norm_supported(c.D));
        cuda::head_rms_norm(d_qkv_ref.get(), c.T, c.H, c.Hkv, c.D, norm.q_w, norm.k_w, norm.eps, dt, nullptr);
      }
      auto d_table = to_device(table);
      auto d_slots = to_device(slots);
      const size_t e = dtype_size(dt), q_bytes = static_cast<size_t>(c.T * c.H * c.D) * e;
      cuda::DeviceBuffer q_ref(q_bytes), q_got(q_bytes), k_ref, v_ref, k_got, v_got;
      cuda::DeviceBuffer k_rows(static_cast<size_t>(c.T * c.Hkv * c.D) * e), v_rows(k_rows.bytes());
      std::vector<float> scales(static_cast<size_t>(c.Hkv));
      for (size_t h = 0; h < scales.size(); ++h) scales[h] = h % 2 ? 0.05f : 1.0f;
      auto d_scales = to_device(scales);
      const PagedKVLayer ref = poisoned_cache(k_ref, v_ref, c, num_blocks, cache, d_scales.as<float>());
      const PagedKVLayer got = poisoned_cache(k_got, v_got, c, num_blocks, cache, d_scales.as<float>());
      ASSERT_TRUE(cuda::rope_kv_write_supported(got, dt, c.R));
      cuda::rope_split_qkv(d_qkv_ref.get(), c.T, c.H, c.Hkv, c.D, d_table.as<float>(), c.R, q_ref.get(), k_rows.get(),
                           v_rows.get(), dt, nullptr);
      cuda::paged_kv_write(ref, k_rows.get(), v_rows.get(), dt, d_slots.as<int32_t>(), c.T, nullptr);
      cuda::rope_split_q_kv_write(d_qkv.get(), c.T, c.H, d_table.as<float>(), c.R, q_got.get(), got,
                                  d_slots.as<int32_t>(), dt, nullptr, norm);
      const std::string what = std::string(dtype_name(dt)) + " cache " + dtype_name(cache) + " H " +
                               std::to_string(c.H) + " D " + std::to_string(c.D) + " R " + std::to_string(c.R) +
                               (with_norm ? " with the q/k norm" : "");
      EXPECT_EQ(to_host<uint8_t>(q_got, q_bytes), to_host<uint8_t>(q_ref, q_bytes)) << what;
      EXPECT_EQ(to_host<uint8_t>(k_got, k_got.bytes()), to_host<uint8_t>(k_ref, k_ref.bytes())) << what;
      EXPECT_EQ(to_host<uint8_t>(v_got, v_got.bytes()), to_host<uint8_t>(v_ref, v_ref.bytes())) << what;
      if (with_norm) {  // the fused call leaves qkv as it was (the reference normalized its own copy)
        EXPECT_EQ(decode(to_host<uint8_t>(d_qkv, qkv.size() * e), dt), qkv) << what;
      }
    }
  }
}

TEST(CudaRopeKvWrite, EqualsRopeSplitThenPagedKvWrite) {
  VLM_REQUIRE_GPU();
  expect_fused_equals_unfused(false);
}

// Qwen3: the q/k RMSNorm folded into the same pass gives the bits of head_rms_norm in place first.
TEST(CudaRopeKvWrite, FusedQkNormEqualsHeadRmsNormFirst) {
  VLM_REQUIRE_GPU();
  expect_fused_equals_unfused(true);
}

TEST(CudaRopeKvWrite, FusedQkNormNeedsAPowerOfTwoOfChunks) {
  EXPECT_TRUE(cuda::rope_kv_write_norm_supported(64));
  EXPECT_TRUE(cuda::rope_kv_write_norm_supported(128));
  EXPECT_TRUE(cuda::rope_kv_write_norm_supported(256));
  EXPECT_FALSE(cuda::rope_kv_write_norm_supported(24));   // 3 chunks of 8
  EXPECT_FALSE(cuda::rope_kv_write_norm_supported(512));  // 64 lanes: more than a warp
}

TEST(CudaRopeKvWrite, SupportedOnlyForA16BitCacheOfTheActivationType) {
  PagedKVLayer kv;
  kv.head_dim = 128;
  kv.dtype = DType::BF16;
  EXPECT_TRUE(cuda::rope_kv_write_supported(kv, DType::BF16, 128));
  EXPECT_FALSE(cuda::rope_kv_write_supported(kv, DType::F16, 128));  // converting cache: the two kernels
  EXPECT_FALSE(cuda::rope_kv_write_supported(kv, DType::BF16, 120));  // R / 2 not a multiple of 8
  kv.dtype = DType::F32;
  EXPECT_FALSE(cuda::rope_kv_write_supported(kv, DType::F32, 128));
  kv.dtype = DType::F8_E4M3;  // quantized in the same pass
  EXPECT_TRUE(cuda::rope_kv_write_supported(kv, DType::BF16, 128));
  EXPECT_TRUE(cuda::rope_kv_write_supported(kv, DType::F16, 128));
}

}  // namespace
}  // namespace vlm::testing
