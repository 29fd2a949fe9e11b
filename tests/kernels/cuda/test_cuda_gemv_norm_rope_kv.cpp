// gemv_norm_rope_kv (kernels/cuda/gemm/gemv_norm_rope_kv.h: the q/k/v GEMV with its input RMSNorm,
// RoPE, Qwen3's q/k norm and the K/V cache write in one launch) against its reference, the two
// launches it replaces: gemv_norm into qkv, then rope_split_q_kv_write (each tested against its own
// reference in test_cuda_gemv_norm.cpp and test_cuda_rope_kv_write.cpp). qkv, q and both caches
// must be the same bytes: bf16 and f16 activations, 16-bit caches and an FP8 one (per-head scales),
// M = 1..4 rows, with and without bias and the q/k norm, full and partial rotary dims, head sizes
// 64 / 128 / 256, a skipped slot (-1), and a grid where blocks loop over several column groups (so
// one block finishes several heads). Outputs and caches are poisoned (0xff) first so an unwritten
// element fails; the same counters serve every call (each call must leave them zero). Skips where
// no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/gemm/gemv_norm_rope_kv.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct QkvCase {
  int64_t H, Hkv, D, R, K;
};

cuda::DeviceBuffer poisoned(size_t bytes) {
  cuda::DeviceBuffer b(bytes);
  VLM_CUDA_CHECK(cudaMemset(b.get(), 0xff, bytes));
  return b;
}

PagedKVLayer cache(cuda::DeviceBuffer& k, cuda::DeviceBuffer& v, const QkvCase& c, int64_t blocks, int B, DType dt,
                   const float* scales) {
  PagedKVLayer kv;
  kv.dtype = dt;
  kv.k_scale = kv.v_scale = scales;
  kv.num_blocks = blocks;
  kv.block_size = B;
  kv.num_kv_heads = static_cast<int>(c.Hkv);
  kv.head_dim = static_cast<int>(c.D);
  const size_t bytes = static_cast<size_t>(blocks * kv.block_stride()) * dtype_size(dt);
  k = poisoned(bytes);
  v = poisoned(bytes);
  kv.k = k.get();
  kv.v = v.get();
  return kv;
}

std::vector<uint8_t> bytes_of(const cuda::DeviceBuffer& b) { return to_host<uint8_t>(b, b.bytes()); }

TEST(CudaGemvNormRopeKv, EqualsGemvNormThenRopeSplitKvWrite) {
  VLM_REQUIRE_GPU();
  constexpr int kB = 16;
  constexpr float kEps = 1e-6f;
  constexpr int kCounters = 96;  // >= H + 2 Hkv of every case
  cuda::DeviceBuffer counters(kCounters * 4);  // shared by every call below: each must leave them zero
  VLM_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  // Qwen3-8B's KV group on a small K; a partial rotary; D = 64 with 5 KV heads; 80 heads of 128 at K = 64
  // (1,280 column groups: more than a wave of blocks holds, so blocks loop and one block finishes
  // several heads); D = 256.
  for (const QkvCase& c : {QkvCase{8, 2, 128, 128, 1024}, QkvCase{6, 3, 64, 32, 520}, QkvCase{20, 5, 64, 64, 64},
                           QkvCase{64, 8, 128, 128, 64}, QkvCase{2, 1, 256, 256, 4096}}) {
    for (const auto& types : {std::pair{DType::BF16, DType::BF16}, std::pair{DType::F16, DType::F16},
                              std::pair{DType::BF16, DType::F8_E4M3}}) {
      const DType dt = types.first, cdt = types.second;
      for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
        for (int variant = 0; variant < 3; ++variant) {  // 0: plain; 1: bias; 2: bias and the q/k norm
          const int64_t W = c.H + 2 * c.Hkv, N = W * c.D, K = c.K, blocks = M + 3;
          ASSERT_LE(W, kCounters);
          const uint32_t seed = static_cast<uint32_t>(100 * M + 10 * variant + c.D);
          auto x = random_vector(M * K, seed);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K; ++k) x[m * K + k] *= 0.5f + static_cast<float>(m);
          auto nw = random_vector(K, seed + 1, 0.2f);
          for (float& v : nw) v += 1.0f;
          const auto w = round_to(random_vector(N * K, seed + 2, 0.05f), dt);
          const auto bias = round_to(random_vector(N, seed + 3), dt);
          const auto table = random_vector(M * c.R, seed + 4);
          auto qw = random_vector(c.D, seed + 5, 0.3f), kw = random_vector(c.D, seed + 6, 0.3f);
          for (float& v : qw) v += 1.0f;
          for (float& v : kw) v += 1.0f;
          std::vector<int32_t> slots(static_cast<size_t>(blocks * kB));
          std::iota(slots.begin(), slots.end(), 0);
          std::shuffle(slots.begin(), slots.end(), std::mt19937(seed));
          slots.resize(static_cast<size_t>(M));
          if (M > 1) slots[1] = -1;  // a padding row: no slot
          std::vector<float> scales(static_cast<size_t>(c.Hkv));
          for (size_t h = 0; h < scales.size(); ++h) scales[h] = h % 2 ? 0.05f : 1.0f;
          auto d_x = to_device(x), d_nw = to_device(nw), d_w = to_device(encode(w, dt)),
               d_b = to_device(encode(bias, dt)), d_table = to_device(table), d_qw = to_device(qw),
               d_kw = to_device(kw), d_slots = to_device(slots), d_scales = to_device(scales);
          const void* b = variant > 0 ? d_b.get() : nullptr;
          cuda::HeadNorm norm;
          if (variant == 2) norm = {d_qw.as<float>(), d_kw.as<float>(), kEps};
          const size_t e = dtype_size(dt);
          cuda::DeviceBuffer k_ref, v_ref, k_got, v_got;
          const PagedKVLayer ref = cache(k_ref, v_ref, c, blocks, kB, cdt, d_scales.as<float>());
          const PagedKVLayer got = cache(k_got, v_got, c, blocks, kB, cdt, d_scales.as<float>());
          ASSERT_TRUE(cuda::gemv_norm_rope_kv_supported(M, K, dt, got, c.R, variant == 2));
          auto qkv_ref = poisoned(M * N * e), qkv_got = poisoned(M * N * e);
          auto q_ref = poisoned(M * c.H * c.D * e), q_got = poisoned(M * c.H * c.D * e);
          cuda::gemv_norm(d_x.as<float>(), nullptr, d_nw.as<float>(), kEps, d_w.get(), dt, b, qkv_ref.get(), dt, false,
                          M, N, K, nullptr);
          cuda::rope_split_q_kv_write(qkv_ref.get(), M, c.H, d_table.as<float>(), c.R, q_ref.get(), ref,
                                      d_slots.as<int32_t>(), dt, nullptr, norm);
          cuda::gemv_norm_rope_kv(d_x.as<float>(), d_nw.as<float>(), kEps, d_w.get(), dt, b, qkv_got.get(), M, K, c.H,
                                  d_table.as<float>(), c.R, q_got.get(), got, d_slots.as<int32_t>(), norm,
                                  counters.as<int32_t>(), nullptr);
          SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " cache " << dtype_name(cdt) << " H " << c.H << " Hkv "
                                            << c.Hkv << " D " << c.D << " R " << c.R << " K " << K << " M " << M
                                            << " variant " << variant);
          EXPECT_EQ(bytes_of(qkv_got), bytes_of(qkv_ref));
          EXPECT_EQ(bytes_of(q_got), bytes_of(q_ref));
          EXPECT_EQ(bytes_of(k_got), bytes_of(k_ref));
          EXPECT_EQ(bytes_of(v_got), bytes_of(v_ref));
          // The q rows against the GEMV's naive reference too (not only the launch pair): decoded q
          // within the 16-bit rounding of RoPE over a naive qkv (variant 0: no norm, no bias).
          if (variant == 0) {
            auto h = poisoned(M * K * e), qkv_naive = poisoned(M * N * e);
            cuda::rms_norm(d_x.as<float>(), nullptr, d_nw.as<float>(), kEps, nullptr, M, K, h.get(), dt, nullptr);
            cuda::gemv_naive(h.get(), d_w.get(), dt, nullptr, qkv_naive.get(), dt, false, M, N, K, nullptr);
            EXPECT_LE(rel_error(decode(bytes_of(qkv_got), dt), decode(bytes_of(qkv_naive), dt)),
                      dt == DType::BF16 ? 8e-3 : 1e-3);
          }
          const std::vector<int32_t> left = to_host<int32_t>(counters, kCounters);
          EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](int32_t v) { return v == 0; })) << "counters left set";
        }
      }
    }
  }
}

TEST(CudaGemvNormRopeKv, SupportNeedsTheGemvAndTheRopeWrite) {
  PagedKVLayer kv;
  kv.head_dim = 128;
  kv.dtype = DType::BF16;
  EXPECT_TRUE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::BF16, kv, 128, true));
  EXPECT_TRUE(cuda::gemv_norm_rope_kv_supported(4, 4096, DType::BF16, kv, 128, true));
  EXPECT_FALSE(cuda::gemv_norm_rope_kv_supported(5, 4096, DType::BF16, kv, 128, true));  // past the GEMV's rows
  EXPECT_FALSE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::F16, kv, 128, false));  // cache of another type
  EXPECT_FALSE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::F32, kv, 128, false));  // the f32 exact path
  kv.head_dim = 512;
  EXPECT_FALSE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::BF16, kv, 128, false));  // past 256
  kv.head_dim = 24;  // three column groups a head: the rotation yes, the q/k norm's lane tree no
  EXPECT_TRUE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::BF16, kv, 16, false));
  EXPECT_FALSE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::BF16, kv, 16, true));
  kv.head_dim = 20;  // not whole column groups of 8
  EXPECT_FALSE(cuda::gemv_norm_rope_kv_supported(1, 4096, DType::BF16, kv, 16, false));
  kv.head_dim = 128;
  kv.dtype = DType::F8_E4M3;
  EXPECT_TRUE(cuda::gemv_norm_rope_kv_supported(2, 4096, DType::BF16, kv, 64, true));
}

}  // namespace
}  // namespace vlm::testing
