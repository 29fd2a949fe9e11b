// rope_kv_decode_attention (kernels/cuda/attention/decode_short.h: q/k norm + RoPE + K/V write +
// decode attention in one launch) against the two-kernel path it replaces (rope_split_q_kv_write
// then paged_decode_attention, default plan) and the naive reference (paged_attention_naive on the
// reference's q and cache): the cache and q byte-equal to the two-kernel path's, the attention
// output within the f32 order of the split sums of both. A table of shapes: heads 32/8, 32/4, 28/4,
// 16/2 (and 8/1 at D 64), contexts 1 .. 8192, 1-4 sequences of different lengths (one with a slot
// of -1: its new token is then read from the cache), bf16 and f16, with and without the q/k norm.
// Skips where no GPU is visible; the fused path's shapes need sm_90 (GTEST_SKIP otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/decode_short.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct ShortCase {
  int H, Hkv, D;
  std::vector<int> ctx;  // per sequence, this step's token included
  DType dt;
  bool norm;
  bool skip_slot = false;  // the last sequence's slot is -1
  // The new key made to weigh (its k row half the sum of its group's q rows, the same q/k norm
  // weights): a wrong new token then moves the output far past the tolerance at long contexts too.
  bool boost = false;
};

std::string name(const ShortCase& c) {
  std::ostringstream o;
  o << dtype_name(c.dt) << " H " << c.H << "/" << c.Hkv << " D " << c.D << " ctx";
  for (int x : c.ctx) o << " " << x;
  o << (c.norm ? " norm" : "") << (c.skip_slot ? " skip-slot" : "") << (c.boost ? " boost" : "");
  return o.str();
}

void run_case(const ShortCase& c) {
  constexpr int kB = 16;  // block size
  const int S = static_cast<int>(c.ctx.size()), W = c.H + 2 * c.Hkv, R = c.D;
  const int max_ctx = *std::max_element(c.ctx.begin(), c.ctx.end());
  const int max_blocks = (max_ctx + kB - 1) / kB;
  const int num_blocks = S * max_blocks + 3;
  const DType dt = c.dt;
  const size_t e = dtype_size(dt);
  // Block tables: a shuffled permutation of the blocks; slot of each sequence's last position.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int32_t> tables(static_cast<size_t>(S * max_blocks), 0), slots(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    for (int b = 0; b < max_blocks; ++b) tables[size_t(s * max_blocks + b)] = perm[size_t(s * max_blocks + b)];
    const int p = c.ctx[size_t(s)] - 1;
    slots[size_t(s)] = tables[size_t(s * max_blocks + p / kB)] * kB + p % kB;
  }
  if (c.skip_slot) slots[size_t(S - 1)] = -1;
  std::vector<int32_t> cu(static_cast<size_t>(S + 1));
  std::iota(cu.begin(), cu.end(), 0);

  // Caches pre-filled with random K/V (the earlier tokens; a skipped slot's token too).
  PagedKVLayer kv;
  kv.dtype = dt;
  kv.num_blocks = num_blocks;
  kv.block_size = kB;
  kv.num_kv_heads = c.Hkv;
  kv.head_dim = c.D;
  const size_t cache_elems = static_cast<size_t>(num_blocks * kv.block_stride());
  const auto k0 = encode(random_vector(cache_elems, 21), dt), v0 = encode(random_vector(cache_elems, 22), dt);
  auto k_ref = to_device(k0), v_ref = to_device(v0), k_got = to_device(k0), v_got = to_device(v0);
  PagedKVLayer ref = kv, got = kv;
  ref.k = k_ref.get();
  ref.v = v_ref.get();
  got.k = k_got.get();
  got.v = v_got.get();

  auto qkv_f = random_vector(size_t(S * W * c.D), 23);
  const int G = c.H / c.Hkv;
  if (c.boost)
    for (int s = 0; s < S; ++s)
      for (int hk = 0; hk < c.Hkv; ++hk)
        for (int d = 0; d < c.D; ++d) {
          float sum = 0.f;
          for (int r = 0; r < G; ++r) sum += qkv_f[size_t((s * W + hk * G + r) * c.D + d)];
          qkv_f[size_t((s * W + c.H + hk) * c.D + d)] = 0.5f * sum;
        }
  const auto qkv = encode(qkv_f, dt);
  // A RoPE table of real cos | sin rows at each sequence's position (angles as the model's).
  std::vector<float> table(size_t(S * R));
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R / 2; ++i) {
      const double a = (c.ctx[size_t(s)] - 1) * std::pow(10000.0, -2.0 * i / R);
      table[size_t(s * R + i)] = float(std::cos(a));
      table[size_t(s * R + R / 2 + i)] = float(std::sin(a));
    }
  const auto qw = random_vector(size_t(c.D), 24, 0.5f), kw = c.boost ? qw : random_vector(size_t(c.D), 25, 0.5f);
  auto d_qkv = to_device(qkv), d_table = to_device(table), d_slots = to_device(slots), d_qw = to_device(qw),
       d_kw = to_device(kw), d_ctx = to_device(c.ctx), d_tables = to_device(tables), d_cu = to_device(cu);
  cuda::HeadNorm norm;
  if (c.norm) {
    norm.q_w = d_qw.as<float>();
    norm.k_w = d_kw.as<float>();
    norm.eps = 1e-6f;
  }
  cuda::CudaAttentionBatch batch;
  batch.num_seqs = S;
  batch.cu_seqlens_q = d_cu.as<int32_t>();
  batch.context_lens = d_ctx.as<int32_t>();
  batch.block_tables = d_tables.as<int32_t>();
  batch.max_blocks_per_seq = max_blocks;
  batch.max_q_len = 1;
  batch.max_context_len = max_ctx;
  const float scale = 1.0f / std::sqrt(float(c.D));
  const std::string what = name(c);
  ASSERT_TRUE(cuda::decode_short_supported(got, dt, c.H, R, c.norm, S, max_ctx)) << what;

  const size_t rows = size_t(S * c.H * c.D);
  cuda::DeviceBuffer q_ref(rows * e), q_got(rows * e), out_ref(rows * e), out_got(rows * e), out_naive(rows * e);
  cuda::DeviceBuffer ws(cuda::paged_decode_workspace_bytes(S, c.H, c.Hkv, c.D, max_ctx));
  // The two-kernel path, then the naive reference over its q and cache.
  cuda::rope_split_q_kv_write(d_qkv.get(), S, c.H, d_table.as<float>(), R, q_ref.get(), ref, d_slots.as<int32_t>(),
                              dt, nullptr, norm);
  cuda::paged_decode_attention(q_ref.get(), dt, c.H, ref, batch, scale, out_ref.get(), ws.get(), nullptr);
  cuda::paged_attention_naive(q_ref.get(), dt, c.H, ref, batch, scale, out_naive.get(), nullptr);
  // The fused launch.
  cuda::rope_kv_decode_attention(d_qkv.get(), c.H, d_table.as<float>(), R, q_got.get(), got, d_slots.as<int32_t>(),
                                 batch, scale, out_got.get(), dt, nullptr, norm);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());

  EXPECT_EQ(to_host<uint8_t>(q_got, rows * e), to_host<uint8_t>(q_ref, rows * e)) << what << ": q";
  EXPECT_EQ(to_host<uint8_t>(k_got, cache_elems * e), to_host<uint8_t>(k_ref, cache_elems * e)) << what << ": K cache";
  EXPECT_EQ(to_host<uint8_t>(v_got, cache_elems * e), to_host<uint8_t>(v_ref, cache_elems * e)) << what << ": V cache";
  const auto o_got = decode(to_host<uint8_t>(out_got, rows * e), dt);
  const auto o_ref = decode(to_host<uint8_t>(out_ref, rows * e), dt);
  const auto o_naive = decode(to_host<uint8_t>(out_naive, rows * e), dt);
  // Against the two-kernel path: the split sums' f32 order (another partition) and the 16-bit
  // output's rounding (test_cuda_attention's merged-vs-reduce bounds, 8e-3 / 1e-3, plus slack);
  // against the naive kernel: P rounded to 16 bits for the mma too (f32 there).
  const bool bf = dt == DType::BF16;
  EXPECT_LE(normalized_error(o_got, o_ref), bf ? 1e-2 : 2e-3) << what << ": vs rope_split_q_kv_write + decode";
  EXPECT_LE(normalized_error(o_got, o_naive), bf ? 2e-2 : 5e-3) << what << ": vs the naive reference";
}

bool require_short_gpu() {
  PagedKVLayer kv;
  kv.dtype = DType::BF16;
  kv.num_kv_heads = 8;
  kv.head_dim = 128;
  kv.block_size = 16;
  return cuda::decode_short_supported(kv, DType::BF16, 32, 128, true, 1, 1024);
}

// One sequence, the contexts around tile (64) and block (16) edges, up to past 4K.
TEST(CudaDecodeShort, OneSequenceMatchesTwoKernelPathAndNaive) {
  VLM_REQUIRE_GPU();
  if (!require_short_gpu()) GTEST_SKIP() << "needs sm_90 (thread-block clusters)";
  for (const auto& [H, Hkv] : {std::pair{32, 8}, std::pair{32, 4}, std::pair{28, 4}, std::pair{16, 2}})
    for (int ctx : {1, 2, 17, 63, 64, 65, 1000, 1024, 4097})
      for (bool norm : {false, true}) {
        run_case({H, Hkv, 128, {ctx}, DType::BF16, norm});
        if (ctx >= 64) run_case({H, Hkv, 128, {ctx}, DType::BF16, norm, false, true});
      }
}

TEST(CudaDecodeShort, F16AndHeadDim64) {
  VLM_REQUIRE_GPU();
  if (!require_short_gpu()) GTEST_SKIP() << "needs sm_90 (thread-block clusters)";
  for (int ctx : {1, 65, 1024})
    for (bool norm : {false, true}) {
      run_case({32, 8, 128, {ctx}, DType::F16, norm});
      run_case({16, 2, 64, {ctx}, DType::BF16, norm});
      run_case({8, 1, 64, {ctx}, DType::F16, norm});
    }
}

// Several sequences of different lengths (empty splits of the shorter ones), the longest 8K.
TEST(CudaDecodeShort, SeveralSequences) {
  VLM_REQUIRE_GPU();
  if (!require_short_gpu()) GTEST_SKIP() << "needs sm_90 (thread-block clusters)";
  for (DType dt : {DType::BF16, DType::F16}) {
    run_case({32, 8, 128, {1024, 1}, dt, true});
    run_case({32, 8, 128, {1024, 129, 2000}, dt, true, false, true});
    run_case({32, 4, 128, {65, 1000, 64}, dt, false});
    run_case({28, 4, 128, {4097, 2, 300, 8192}, dt, true});
    run_case({16, 2, 64, {1, 1, 1, 1}, dt, false});
  }
}

// A slot of -1 (a padded row of a graph step): nothing written, its new token read from the cache.
TEST(CudaDecodeShort, SkippedSlotReadsTheCache) {
  VLM_REQUIRE_GPU();
  if (!require_short_gpu()) GTEST_SKIP() << "needs sm_90 (thread-block clusters)";
  run_case({32, 8, 128, {1024, 70}, DType::BF16, true, true});
  run_case({32, 4, 128, {5}, DType::F16, false, true});
}

// The plan's limits (host only): 16-bit cache of the activations' type, <= 4 sequences, <= 8K.
TEST(CudaDecodeShort, SupportedShapes) {
  VLM_REQUIRE_GPU();
  if (!require_short_gpu()) GTEST_SKIP() << "needs sm_90 (thread-block clusters)";
  PagedKVLayer kv;
  kv.dtype = DType::BF16;
  kv.num_kv_heads = 8;
  kv.head_dim = 128;
  kv.block_size = 16;
  EXPECT_TRUE(cuda::decode_short_supported(kv, DType::BF16, 32, 128, true, 4, cuda::kDecodeShortMaxContext));
  EXPECT_FALSE(cuda::decode_short_supported(kv, DType::BF16, 32, 128, true, 5, 1024));
  EXPECT_FALSE(cuda::decode_short_supported(kv, DType::BF16, 32, 128, true, 1, cuda::kDecodeShortMaxContext + 1));
  EXPECT_FALSE(cuda::decode_short_supported(kv, DType::F16, 32, 128, true, 1, 1024));  // converting cache
  EXPECT_FALSE(cuda::decode_short_supported(kv, DType::BF16, 8 * 17, 128, true, 1, 1024));  // G 17
  kv.dtype = DType::F8_E4M3;
  EXPECT_FALSE(cuda::decode_short_supported(kv, DType::BF16, 32, 128, true, 1, 1024));
  kv.dtype = DType::BF16;
  kv.head_dim = 256;
  EXPECT_FALSE(cuda::decode_short_supported(kv, DType::BF16, 32, 256, true, 1, 1024));
}

}  // namespace
}  // namespace vlm::testing
