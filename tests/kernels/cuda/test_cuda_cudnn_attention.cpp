// CudnnAttention (cuDNN's fused flash attention through the backend graph API) against the naive
// CUDA reference (paged_attention_naive) on small shapes: causal first chunks (seq_q == seq_kv),
// a chunk over earlier context (seq_q < seq_kv, bottom-right causal), GQA 1/4/7, D 64/128,
// batch 1 and 2, bf16 and f16; padded shapes (bottom_right, run_padded: real lengths inside
// bucketed seq_q / seq_kv, the padding keys holding large finite values so a leak shows), compared
// on the real rows. Skips where no GPU is visible or cuDNN 9 cannot be loaded (saying
// why); a loaded cuDNN that builds no plan fails, with cuDNN's log.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cudnn_attention.h"
#include "kernels/cuda/attention/cudnn_library.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::decode;
using testing::encode;
using testing::normalized_error;
using testing::to_device;

struct Case {
  int batch, seq_q, seq_kv, H, Hkv, D;
  DType dt;
};

// The causal shape cuDNN sees for a case (bottom_right: a padded plan, real lengths at run time).
cuda::CudnnAttentionShape shape_of(const Case& c, bool bottom_right) {
  cuda::CudnnAttentionShape shape;
  shape.batch = c.batch;
  shape.seq_q = c.seq_q;
  shape.seq_kv = c.seq_kv;
  shape.heads = c.H;
  shape.kv_heads = c.Hkv;
  shape.head_dim = c.D;
  shape.causal = true;
  shape.bottom_right = bottom_right;
  shape.dtype = c.dt;
  return shape;
}

// Runs cuDNN on contiguous q/k/v and the naive kernel on the same K/V written into a paged cache
// (block size 16, each sequence its own blocks); compares the outputs.
void run_case(cuda::CudnnAttention& att, const Case& c, uint32_t seed) {
  SCOPED_TRACE("batch " + std::to_string(c.batch) + " seq_q " + std::to_string(c.seq_q) + " seq_kv " +
               std::to_string(c.seq_kv) + " H " + std::to_string(c.H) + "/" + std::to_string(c.Hkv) + " D " +
               std::to_string(c.D) + (c.dt == DType::BF16 ? " bf16" : " f16"));
  constexpr int kB = 16;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  const int T = c.batch * c.seq_q, W = c.batch * c.seq_kv;
  std::vector<float> q(size_t(T) * c.H * c.D), k(size_t(W) * c.Hkv * c.D), v(k.size());  // [T,H,D], [W,Hkv,D]
  for (float& x : q) x = 2.f * uni(rng);
  for (float& x : k) x = uni(rng);
  for (float& x : v) x = uni(rng);
  const auto qb = encode(q, c.dt), kb = encode(k, c.dt), vb = encode(v, c.dt);
  auto dq = to_device(qb), dk = to_device(kb), dv = to_device(vb);
  cuda::DeviceBuffer dout(qb.size()), dref(qb.size());

  // Paged cache for the reference: sequence s's token j in slot s * per * kB + j.
  const int per = (c.seq_kv + kB - 1) / kB;
  PagedKVLayer kv;
  kv.dtype = c.dt;
  kv.num_blocks = int64_t(c.batch) * per;
  kv.block_size = kB;
  kv.num_kv_heads = c.Hkv;
  kv.head_dim = c.D;
  const size_t cache_bytes = size_t(kv.num_blocks) * kv.block_stride() * dtype_size(c.dt);
  cuda::DeviceBuffer ck(cache_bytes), cv(cache_bytes);
  kv.k = ck.get();
  kv.v = cv.get();
  std::vector<int32_t> slots, cu{0}, lens, table(size_t(c.batch) * per);
  for (int s = 0; s < c.batch; ++s) {
    for (int j = 0; j < c.seq_kv; ++j) slots.push_back(s * per * kB + j);
    cu.push_back(cu.back() + c.seq_q);
    lens.push_back(c.seq_kv);
  }
  std::iota(table.begin(), table.end(), 0);
  auto dslots = to_device(slots), dcu = to_device(cu), dlens = to_device(lens), dtable = to_device(table);
  cuda::paged_kv_write(kv, dk.get(), dv.get(), c.dt, static_cast<int32_t*>(dslots.get()), W, nullptr);
  cuda::CudaAttentionBatch batch;
  batch.num_seqs = c.batch;
  batch.cu_seqlens_q = static_cast<int32_t*>(dcu.get());
  batch.context_lens = static_cast<int32_t*>(dlens.get());
  batch.block_tables = static_cast<int32_t*>(dtable.get());
  batch.max_blocks_per_seq = per;
  batch.max_q_len = c.seq_q;
  batch.max_context_len = c.seq_kv;
  const float scale = 1.f / std::sqrt(float(c.D));
  cuda::paged_attention_naive(dq.get(), c.dt, c.H, kv, batch, scale, dref.get(), nullptr);

  const cuda::CudnnAttentionShape shape = shape_of(c, /*bottom_right=*/false);
  std::string why;
  ASSERT_TRUE(att.run(shape, dq.get(), dk.get(), dv.get(), dout.get(), scale, nullptr, &why))
      << why << "\nplan log:\n" << att.log(shape);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = decode(testing::to_host<uint8_t>(dout, qb.size()), c.dt);
  const auto ref = decode(testing::to_host<uint8_t>(dref, qb.size()), c.dt);
  // bf16 inputs and outputs, P rounded to the I/O dtype inside cuDNN: the bf16 closeness the
  // other attention tests allow (2e-2 for the cache dtype + 8e-3 for the output).
  EXPECT_LE(normalized_error(got, ref), c.dt == DType::BF16 ? 2.8e-2 : 1.2e-2);
}

TEST(CudnnAttention, MatchesNaiveReference) {
  VLM_REQUIRE_GPU();
  cuda::CudnnAttention att;
  std::string why;
  if (!att.available(&why)) GTEST_SKIP() << "cuDNN unavailable: " << why;
  std::string found;
  cuda::cudnn_api(&found);
  std::printf("cuDNN %zu from %s (%s)\n", att.version(), att.library_path().c_str(), found.c_str());
  const Case cases[] = {
      {1, 128, 128, 4, 1, 128, DType::BF16},   // GQA 4, first chunk
      {1, 200, 200, 7, 1, 128, DType::BF16},   // GQA 7, length not a multiple of 64
      {2, 96, 96, 4, 4, 64, DType::BF16},      // MHA, D 64, two sequences
      {1, 48, 160, 8, 2, 128, DType::BF16},    // chunk over cached context (bottom-right causal)
      {1, 130, 130, 4, 2, 128, DType::F16},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) run_case(att, c, seed++);
}

// A padded shape: cuDNN sees q [qp, H, D] and k/v [kvp, Hkv, D] whose first real_q / real_kv rows
// are the real ones (the rest: padding of magnitude 4, finite); the naive reference sees only the
// real rows. The first real_q output rows must match.
void run_padded_case(cuda::CudnnAttention& att, const Case& c, int real_q, int real_kv, uint32_t seed) {
  SCOPED_TRACE("padded seq_q " + std::to_string(c.seq_q) + " seq_kv " + std::to_string(c.seq_kv) + " real " +
               std::to_string(real_q) + " / " + std::to_string(real_kv));
  constexpr int kB = 16;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> q(size_t(c.seq_q) * c.H * c.D), k(size_t(c.seq_kv) * c.Hkv * c.D), v(k.size());
  for (float& x : q) x = 2.f * uni(rng);
  for (float& x : k) x = uni(rng);
  for (float& x : v) x = uni(rng);
  for (size_t i = size_t(real_kv) * c.Hkv * c.D; i < k.size(); ++i) k[i] = v[i] = 4.f;  // padding keys
  const auto qb = encode(q, c.dt), kb = encode(k, c.dt), vb = encode(v, c.dt);
  auto dq = to_device(qb), dk = to_device(kb), dv = to_device(vb);
  cuda::DeviceBuffer dout(qb.size()), dref(qb.size());
  const int per = (real_kv + kB - 1) / kB;
  PagedKVLayer kv;
  kv.dtype = c.dt;
  kv.num_blocks = per;
  kv.block_size = kB;
  kv.num_kv_heads = c.Hkv;
  kv.head_dim = c.D;
  const size_t cache_bytes = size_t(kv.num_blocks) * kv.block_stride() * dtype_size(c.dt);
  cuda::DeviceBuffer ck(cache_bytes), cv(cache_bytes);
  kv.k = ck.get();
  kv.v = cv.get();
  std::vector<int32_t> slots(static_cast<size_t>(real_kv)), cu{0, real_q}, lens{real_kv},
      table(static_cast<size_t>(per));
  std::iota(slots.begin(), slots.end(), 0);
  std::iota(table.begin(), table.end(), 0);
  auto dslots = to_device(slots), dcu = to_device(cu), dlens = to_device(lens), dtable = to_device(table);
  cuda::paged_kv_write(kv, dk.get(), dv.get(), c.dt, static_cast<int32_t*>(dslots.get()), real_kv, nullptr);
  cuda::CudaAttentionBatch batch;
  batch.num_seqs = 1;
  batch.cu_seqlens_q = static_cast<int32_t*>(dcu.get());
  batch.context_lens = static_cast<int32_t*>(dlens.get());
  batch.block_tables = static_cast<int32_t*>(dtable.get());
  batch.max_blocks_per_seq = per;
  batch.max_q_len = real_q;
  batch.max_context_len = real_kv;
  const float scale = 1.f / std::sqrt(float(c.D));
  cuda::paged_attention_naive(dq.get(), c.dt, c.H, kv, batch, scale, dref.get(), nullptr);
  const cuda::CudnnAttentionShape shape = shape_of(c, /*bottom_right=*/true);
  std::string why;
  ASSERT_TRUE(att.run_padded(shape, real_q, real_kv, dq.get(), dk.get(), dv.get(), dout.get(), scale, nullptr, &why))
      << why << "\nplan log:\n" << att.log(shape);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const size_t n = size_t(real_q) * c.H * c.D * dtype_size(c.dt);
  const auto got = decode(testing::to_host<uint8_t>(dout, n), c.dt);
  const auto ref = decode(testing::to_host<uint8_t>(dref, n), c.dt);
  const double err = normalized_error(got, ref);
  EXPECT_LE(err, c.dt == DType::BF16 ? 2.8e-2 : 1.2e-2) << "normalized error " << err;
}

TEST(CudnnAttention, PaddedShapesMatchNaiveReference) {
  VLM_REQUIRE_GPU();
  cuda::CudnnAttention att;
  std::string why;
  if (!att.available(&why)) GTEST_SKIP() << "cuDNN unavailable: " << why;
  // One plan (256 x 512) for several real lengths, then a square bucket with a shorter chunk.
  const Case bucket{1, 256, 512, 8, 2, 128, DType::BF16};
  run_padded_case(att, bucket, 256, 512, 11);  // no padding
  run_padded_case(att, bucket, 200, 480, 12);  // both padded
  run_padded_case(att, bucket, 256, 300, 13);  // keys padded only
  run_padded_case(att, bucket, 37, 37, 14);    // a first chunk inside a padded plan
  EXPECT_GT(att.num_candidates({1, 256, 512, 8, 2, 128, true, true, DType::BF16}), 0);  // one plan served all four
  run_padded_case(att, {1, 512, 512, 4, 1, 64, DType::F16}, 300, 500, 15);
  // A large plan serving a small real context (the decoder's one-kv-plan policy), and the last
  // real query row seeing every real key.
  const Case wide{1, 1024, 4096, 8, 2, 128, DType::BF16};
  run_padded_case(att, wide, 1000, 1500, 16);
  run_padded_case(att, wide, 64, 3000, 17);
  // A padded plan refuses real lengths outside its shape.
  cuda::CudnnAttentionShape s{1, 256, 512, 8, 2, 128, true, true, DType::BF16};
  EXPECT_FALSE(att.run_padded(s, 300, 400, nullptr, nullptr, nullptr, nullptr, 1.f, nullptr, &why));
  EXPECT_NE(why.find("outside"), std::string::npos) << why;
}

// Every finalized candidate (engine config, heuristics modes A and B) of an exact and of a padded
// plan matches the reference, and so does the one autotune keeps (CudnnAttentionOptions::autotune: the first run
// times them all on the caller's buffers, then runs the fastest).
TEST(CudnnAttention, EveryCandidateAndAutotuneMatchNaiveReference) {
  VLM_REQUIRE_GPU();
  cuda::CudnnAttentionOptions fixed;  // the candidates autotune chooses among: heuristics A's, then B's
  fixed.autotune = 0;
  fixed.both_heuristics = true;
  cuda::CudnnAttention probe(fixed);
  std::string why;
  if (!probe.available(&why)) GTEST_SKIP() << "cuDNN unavailable: " << why;
  const Case exact{1, 1024, 1024, 8, 2, 128, DType::BF16}, padded{1, 512, 1024, 8, 2, 128, DType::BF16};
  ASSERT_TRUE(probe.prepare(shape_of(exact, false), &why)) << why;
  ASSERT_TRUE(probe.prepare(shape_of(padded, true), &why)) << why;
  const int n_exact = probe.num_candidates(shape_of(exact, false)), n_padded = probe.num_candidates(shape_of(padded, true));
  std::printf("candidates: exact %d, padded %d\n", n_exact, n_padded);
  uint32_t seed = 31;
  for (int c = 0; c < n_exact; ++c) {
    SCOPED_TRACE("exact candidate " + std::to_string(c));
    cuda::CudnnAttention att(fixed);
    ASSERT_TRUE(att.prepare(shape_of(exact, false), &why)) << why;
    att.select(shape_of(exact, false), c);
    run_case(att, exact, seed++);
    EXPECT_EQ(att.selected(shape_of(exact, false)), c);
  }
  for (int c = 0; c < n_padded; ++c) {
    SCOPED_TRACE("padded candidate " + std::to_string(c));
    cuda::CudnnAttention att(fixed);
    ASSERT_TRUE(att.prepare(shape_of(padded, true), &why)) << why;
    att.select(shape_of(padded, true), c);
    run_padded_case(att, padded, 400, 900, seed++);
  }
  cuda::CudnnAttentionOptions tuned;
  tuned.autotune = 1;
  cuda::CudnnAttention att(tuned);
  run_case(att, exact, seed++);  // the first run tunes, then runs the kept candidate
  run_padded_case(att, padded, 300, 700, seed++);
  for (const auto& shape : {shape_of(exact, false), shape_of(padded, true)}) {
    const std::vector<float> ms = att.autotune_ms(shape);
    const int sel = att.selected(shape);
    ASSERT_GE(sel, 0);
    if (att.num_candidates(shape) > 1) {
      ASSERT_EQ(int(ms.size()), att.num_candidates(shape));
      EXPECT_TRUE(std::isfinite(ms[size_t(sel)]));
      EXPECT_EQ(*std::min_element(ms.begin(), ms.end()), ms[size_t(sel)]);
    }
  }
  run_case(att, exact, seed++);  // later runs reuse the choice
}

TEST(CudnnAttention, RejectsWhatItDoesNotCover) {
  cuda::CudnnAttentionShape s;
  s.seq_q = s.seq_kv = 64;
  s.heads = 4;
  s.kv_heads = 4;
  s.head_dim = 128;
  std::string why;
  EXPECT_TRUE(cuda::CudnnAttention::supports(s, &why)) << why;
  s.dtype = DType::F32;
  EXPECT_FALSE(cuda::CudnnAttention::supports(s, &why));
  EXPECT_NE(why.find("BF16"), std::string::npos) << why;
  s.dtype = DType::BF16;
  s.kv_heads = 3;
  EXPECT_FALSE(cuda::CudnnAttention::supports(s, &why));
  s.kv_heads = 4;
  s.seq_kv = 32;  // fewer keys than queries
  EXPECT_FALSE(cuda::CudnnAttention::supports(s, &why));
  cuda::CudnnAttention att;
  s.dtype = DType::F32;
  EXPECT_FALSE(att.run(s, nullptr, nullptr, nullptr, nullptr, 1.f, nullptr, &why));
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace vlm
