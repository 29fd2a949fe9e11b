// block_sparse_attention against dense paged_attention (all-blocks plans, with and without
// permutations: causality by original positions) and against block_sparse_attention_ref (random
// sparse plans with permutations and gathered columns), over a table of shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "tests/kernels/sparse_cache_fixture.h"

namespace vlm {
namespace {

using testing_sparse::max_row_rel_error;
using testing_sparse::SeqShape;
using testing_sparse::SparseCache;

struct Case {
  std::vector<SeqShape> seqs;
  std::vector<bool> planned;  // which sequences get a plan (the rest: dense, e.g. decode rows)
  int H, Hkv, D, B;
  DType dtype;
  int bm, bn;
};

std::vector<Case> cases() {
  const DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;
  return {
      {{{37, 37}}, {true}, 1, 1, 8, 4, F32, 16, 16},
      {{{100, 163}}, {true}, 4, 2, 64, 16, F32, 64, 64},
      {{{130, 130}}, {true}, 14, 2, 64, 16, BF16, 64, 64},
      {{{200, 500}, {1, 50}}, {true, false}, 6, 3, 80, 32, F16, 32, 64},
      {{{64, 64}, {33, 90}}, {true, true}, 8, 1, 128, 16, BF16, 64, 32},
      {{{77, 1000}, {1, 40}, {45, 45}}, {true, false, true}, 4, 4, 16, 1, F32, 16, 48},
      {{{5, 300}}, {true}, 2, 1, 64, 8, F32, 64, 64},
  };
}

// A plan keeping each causal key block with probability keep (always the diagonal block when
// diag), plus random gathered columns; optionally random query/key permutations.
BlockSparsePlan random_plan(int q_len, int N, int H, int bm, int bn, double keep, double col_p,
                            bool permute, std::mt19937& rng) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  p.block_m = bm;
  p.block_n = bn;
  std::uniform_real_distribution<double> u(0, 1);
  for (int h = 0; h < H; ++h) {
    HeadPlan hp = empty_head_plan(p.num_qblocks());
    if (permute && u(rng) < 0.7) {
      hp.q_order.resize(q_len);
      for (int i = 0; i < q_len; ++i) hp.q_order[i] = i;
      std::shuffle(hp.q_order.begin(), hp.q_order.end(), rng);
    }
    if (permute && u(rng) < 0.7) {
      hp.k_order.resize(N);
      for (int i = 0; i < N; ++i) hp.k_order[i] = i;
      std::shuffle(hp.k_order.begin(), hp.k_order.end(), rng);
    }
    for (int m = 0; m < p.num_qblocks(); ++m) {
      std::vector<uint8_t> in_block(N, 0);
      for (int b = 0; b < p.num_kblocks(); ++b)
        if (u(rng) < keep) {
          hp.blocks.push_back(b * bn);
          for (int i = b * bn; i < std::min(N, (b + 1) * bn); ++i)
            in_block[hp.k_order.empty() ? i : hp.k_order[i]] = 1;
        }
      for (int j = 0; j < N; ++j)
        if (!in_block[j] && u(rng) < col_p) hp.cols.push_back(j);
      hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
      hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
    }
    p.heads.push_back(std::move(hp));
  }
  validate_plan(p);
  return p;
}

TEST(BlockSparseAttention, AllBlocksPlanEqualsDense) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const auto table = cases();
    for (size_t ci = 0; ci < table.size(); ++ci) {
      const Case& c = table[ci];
      SparseCache sc(c.seqs, c.H, c.Hkv, c.D, c.B, c.dtype, 100 + ci);
      std::vector<BlockSparsePlan> plans;
      for (const auto& s : c.seqs) plans.push_back(dense_plan(s.q_len, s.ctx, c.H, c.bm, c.bn));
      std::vector<const BlockSparsePlan*> ptrs;
      for (size_t s = 0; s < plans.size(); ++s) ptrs.push_back(&plans[s]);
      std::vector<float> dense(sc.q.size(), NAN), sparse(sc.q.size(), NAN);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      paged_attention(sc.q.data(), c.H, sc.kv, sc.batch, scale, dense.data());
      block_sparse_attention(sc.q.data(), c.H, sc.kv, sc.batch, ptrs, scale, sparse.data());
      EXPECT_LT(max_row_rel_error(sparse, dense, c.D), 1e-5) << "case " << ci << " threads " << threads;
    }
  }
  set_num_threads(2);
}

TEST(BlockSparseAttention, PermutedAllBlocksPlanStaysCausal) {
  std::mt19937 rng(5);
  const auto table = cases();
  for (size_t ci = 0; ci < table.size(); ++ci) {
    const Case& c = table[ci];
    SparseCache sc(c.seqs, c.H, c.Hkv, c.D, c.B, c.dtype, 200 + ci);
    std::vector<BlockSparsePlan> plans;
    for (const auto& s : c.seqs) {
      // every key block for every query block, rows and keys shuffled: the causal mask by
      // original positions must make it exactly dense causal attention
      BlockSparsePlan p = random_plan(s.q_len, s.ctx, c.H, c.bm, c.bn, 1.0, 0.0, true, rng);
      plans.push_back(std::move(p));
    }
    std::vector<const BlockSparsePlan*> ptrs;
    for (auto& p : plans) ptrs.push_back(&p);
    std::vector<float> dense(sc.q.size(), NAN), sparse(sc.q.size(), NAN);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    paged_attention(sc.q.data(), c.H, sc.kv, sc.batch, scale, dense.data());
    block_sparse_attention(sc.q.data(), c.H, sc.kv, sc.batch, ptrs, scale, sparse.data());
    EXPECT_LT(max_row_rel_error(sparse, dense, c.D), 1e-5) << "case " << ci;
  }
}

TEST(BlockSparseAttention, SparsePlanEqualsReference) {
  std::mt19937 rng(9);
  const auto table = cases();
  for (bool permute : {false, true})
    for (double keep : {0.1, 0.4})
      for (size_t ci = 0; ci < table.size(); ++ci) {
        const Case& c = table[ci];
        SparseCache sc(c.seqs, c.H, c.Hkv, c.D, c.B, c.dtype, 300 + ci);
        std::vector<BlockSparsePlan> plans;
        for (const auto& s : c.seqs)
          plans.push_back(random_plan(s.q_len, s.ctx, c.H, c.bm, c.bn, keep, 0.03, permute, rng));
        std::vector<const BlockSparsePlan*> ptrs;
        for (size_t s = 0; s < plans.size(); ++s) ptrs.push_back(c.planned[s] ? &plans[s] : nullptr);
        std::vector<float> ref(sc.q.size(), 0.0f), opt(sc.q.size(), 0.0f);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
        block_sparse_attention_ref(sc.q.data(), c.H, sc.kv, sc.batch, ptrs, scale, ref.data());
        block_sparse_attention(sc.q.data(), c.H, sc.kv, sc.batch, ptrs, scale, opt.data());
        EXPECT_LT(max_row_rel_error(opt, ref, c.D), 1e-5)
            << "case " << ci << " keep " << keep << " permute " << permute;
      }
}

TEST(BlockSparsePlan, ValidateRejectsMalformedPlans) {
  BlockSparsePlan p = dense_plan(10, 20, 1, 4, 4);
  validate_plan(p);
  BlockSparsePlan dup = p;
  dup.heads[0].cols = {0};  // key 0 is inside block 0 of query block 0
  dup.heads[0].col_ptr = {0, 1, 1, 1};
  EXPECT_THROW(validate_plan(dup), InternalError);
  BlockSparsePlan bad = p;
  bad.heads[0].q_order = {0, 1, 2, 3, 4, 5, 6, 7, 8, 8};
  EXPECT_THROW(validate_plan(bad), InternalError);
  EXPECT_NEAR(plan_block_density(p), 1.0, 1e-12);
  EXPECT_NEAR(head_plan_token_density(p, 0), 1.0, 1e-12);
}

}  // namespace
}  // namespace vlm
