// attn::PrefetchLines, the cache lines a later key tile reads, requested from inside the tile
// kernels' loops: every TileOps implementation gives the same scores and p.v with a list as
// without one (a prefetch changes no value), issues no line twice and none past the list, and
// leaves the rest to the caller's issue_all.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention/paged_attention_internal.h"
#include "kernels/core/dtype.h"

namespace vlm {
namespace {

std::vector<const attn::TileOps*> every_tile_ops() {
  std::vector<const attn::TileOps*> ops{&attn::tile_ops_generic()};
  if (attn::tile_ops_avx512()) ops.push_back(attn::tile_ops_avx512());
  if (attn::tile_ops_avx512_bf16()) ops.push_back(attn::tile_ops_avx512_bf16());
  return ops;
}

// One key tile (n keys of one kv head, one block table) of a BF16 cache, M query vectors.
struct TileFixture {
  static constexpr int KT = attn::kKeyTile;
  int M, D, Dp, n;
  std::vector<uint16_t> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> table;
  std::vector<float> q;  // [M, Dp], zero padded
  std::vector<int> nvalid;

  TileFixture(int M_, int D_, int n_, uint32_t seed) : M(M_), D(D_), Dp(attn::padded_head_dim(D_)), n(n_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    const int B = 16, Hkv = 2, nb = (n + B - 1) / B + 1;
    kv = PagedKVLayer{nullptr, nullptr, DType::BF16, nb, B, Hkv, D};
    kbuf.resize(static_cast<size_t>(nb) * kv.block_stride());
    vbuf.resize(kbuf.size());
    for (auto& x : kbuf) x = f32_to_bf16(uni(rng));
    for (auto& x : vbuf) x = f32_to_bf16(uni(rng));
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    for (int b = nb - 1; b >= 0; --b) table.push_back(b);  // blocks in reverse order
    q.assign(static_cast<size_t>(M) * Dp, 0.0f);
    for (int m = 0; m < M; ++m)
      for (int d = 0; d < D; ++d) q[static_cast<size_t>(m) * Dp + d] = uni(rng);
    for (int m = 0; m < M; ++m) nvalid.push_back(std::max(1, n - m % 5));  // a few masked keys
  }

  // scores, softmax and p.v of the tile for kv head 1 through ops, with pf (or null); s and acc out.
  void run(const attn::TileOps& ops, attn::PrefetchLines* pf, std::vector<float>& s,
           std::vector<float>& acc) const {
    std::vector<float> qt(q), kt(static_cast<size_t>(Dp) * KT), vb(static_cast<size_t>(KT) * Dp, 0.0f);
    std::vector<float> m_run(M, -INFINITY), l_run(static_cast<size_t>(M) * attn::kSumLanes, 0.0f);
    const float* vrows[KT];
    if (ops.prepare_q) ops.prepare_q(qt.data(), M, Dp);
    ops.load_kv(kv, table.data(), 1, 0, n, Dp, kt.data(), vb.data(), vrows);
    s.assign(static_cast<size_t>(M) * KT, 0.0f);
    acc.assign(static_cast<size_t>(M) * Dp, 0.0f);
    ops.scores(qt.data(), M, Dp, kt.data(), n, s.data(), pf);
    for (int m = 0; m < M; ++m)  // columns >= n are unspecified: compare the valid ones
      std::fill(s.begin() + m * KT + n, s.begin() + (m + 1) * KT, 0.0f);
    std::vector<float> p(s);
    ops.softmax(p.data(), nvalid.data(), M, Dp, m_run.data(), l_run.data(), acc.data());
    ops.pv(p.data(), nvalid.data(), M, Dp, vrows, acc.data(), pf);
  }
};

TEST(PrefetchLines, TileKernelsGiveTheSameValuesWithALineList) {
  std::vector<char> target(64 * 1024);
  for (const attn::TileOps* ops : every_tile_ops())
    for (const auto& [M, D, n] : {std::tuple{7, 64, 32}, std::tuple{1, 64, 17}, std::tuple{14, 128, 32},
                                  std::tuple{9, 80, 5}}) {
      if (ops == attn::tile_ops_avx512_bf16() && D % 32 != 0) continue;  // bf16_tiles_fit
      TileFixture f(M, D, n, 11 + M + D + n);
      std::vector<float> s0, acc0, s1, acc1;
      f.run(*ops, nullptr, s0, acc0);
      for (int lines : {0, 3, 128, 1000}) {
        attn::PrefetchLines pf;
        for (int i = 0; i < lines; ++i) pf.line[pf.n++] = target.data() + 64 * i;
        f.run(*ops, &pf, s1, acc1);
        const std::string what = std::string(ops->name) + " M=" + std::to_string(M) + " D=" +
                                 std::to_string(D) + " n=" + std::to_string(n) + " lines=" + std::to_string(lines);
        EXPECT_EQ(s1, s0) << what;
        EXPECT_EQ(acc1, acc0) << what;
        EXPECT_GE(pf.next, 0) << what;
        EXPECT_LE(pf.next, pf.n) << what;  // never past the list
        if (ops != &attn::tile_ops_generic() && lines > 0) {
          EXPECT_GT(pf.next, 0) << what << ": the AVX-512 tiles spread the requests over their loops";
        }
        pf.issue_all();
        EXPECT_EQ(pf.next, pf.n) << what;
      }
    }
}

}  // namespace
}  // namespace vlm
