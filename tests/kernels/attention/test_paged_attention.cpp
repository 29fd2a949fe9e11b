// paged_attention (every tile implementation) against paged_attention_ref over a table of
// batches; paged_attention_ref against dense attention written out by hand; write_kv round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/attention/paged_attention_internal.h"
#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

struct SeqSpec {
  int q_len;  // query rows this step (the tail of the sequence)
  int ctx;    // tokens in the cache, these rows included
};

struct Case {
  std::vector<SeqSpec> seqs;
  int H, Hkv, D, B;
  DType dtype;
  float kmag = 1.0f;   // key magnitude: larger gives peakier softmax rows
  float kramp = 0.0f;  // adds kramp * j / ctx to every element of key j: scores drift along
                       // the sequence (up or down by the sign of sum(q)), forcing rescales
};

uint16_t nan_bits(DType t) { return t == DType::BF16 ? 0x7fc0 : 0x7e00; }

// A paged cache holding the batch's sequences in shuffled, non-contiguous blocks. Slots that no
// sequence owns hold NaN, so reading one shows up in the output.
struct PagedBatch {
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> cu, ctx, tables;
  std::vector<float> q;  // [T, H, D]
  AttentionBatch batch;
  int T = 0;

  PagedBatch(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    const int n = static_cast<int>(c.seqs.size());
    int max_blocks = 1, total_blocks = 3;  // a few spare blocks nobody owns
    for (const auto& s : c.seqs) {
      const int nb = (s.ctx + c.B - 1) / c.B;
      max_blocks = std::max(max_blocks, nb + 2);
      total_blocks += nb;
    }
    kv.dtype = c.dtype;
    kv.num_blocks = total_blocks;
    kv.block_size = c.B;
    kv.num_kv_heads = c.Hkv;
    kv.head_dim = c.D;
    const size_t bytes =
        static_cast<size_t>(total_blocks) * kv.block_stride() * dtype_size(c.dtype);
    kbuf.resize(bytes);
    vbuf.resize(bytes);
    for (auto* buf : {&kbuf, &vbuf}) {
      if (c.dtype == DType::F32) {
        const float nanf = NAN;
        for (size_t i = 0; i < bytes; i += 4) std::memcpy(buf->data() + i, &nanf, 4);
      } else {
        const uint16_t nb = nan_bits(c.dtype);
        for (size_t i = 0; i < bytes; i += 2) std::memcpy(buf->data() + i, &nb, 2);
      }
    }
    kv.k = kbuf.data();
    kv.v = vbuf.data();

    std::vector<int32_t> perm(total_blocks);
    for (int i = 0; i < total_blocks; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(static_cast<size_t>(n) * max_blocks, 1 << 30);  // unused entries: garbage
    cu.push_back(0);
    std::vector<int32_t> slots;
    std::vector<float> kin, vin;
    int next = 0;
    for (int s = 0; s < n; ++s) {
      const int nb = (c.seqs[s].ctx + c.B - 1) / c.B;
      for (int j = 0; j < nb; ++j) tables[static_cast<size_t>(s) * max_blocks + j] = perm[next++];
      for (int j = 0; j < c.seqs[s].ctx; ++j) {
        slots.push_back(tables[static_cast<size_t>(s) * max_blocks + j / c.B] * c.B + j % c.B);
        if (j % 7 == 3) slots.push_back(-1);  // skipped tokens carry NaN
      }
      cu.push_back(cu.back() + c.seqs[s].q_len);
      ctx.push_back(c.seqs[s].ctx);
    }
    std::vector<float> ramp;  // per written token
    for (int s = 0; s < n; ++s)
      for (int j = 0; j < c.seqs[s].ctx; ++j) {
        ramp.push_back(c.kramp * j / c.seqs[s].ctx);
        if (j % 7 == 3) ramp.push_back(0.0f);
      }
    for (size_t t = 0; t < slots.size(); ++t)
      for (int i = 0; i < c.Hkv * c.D; ++i) {
        const int32_t sl = slots[t];
        kin.push_back(sl < 0 ? NAN : c.kmag * uni(rng) + ramp[t]);
        vin.push_back(sl < 0 ? NAN : uni(rng));
      }
    write_kv(kv, kin.data(), vin.data(), slots.data(), static_cast<int64_t>(slots.size()));

    T = cu.back();
    q.resize(static_cast<size_t>(T) * c.H * c.D);
    for (auto& x : q) x = uni(rng);
    batch.num_seqs = n;
    batch.cu_seqlens_q = cu.data();
    batch.context_lens = ctx.data();
    batch.block_tables = tables.data();
    batch.max_blocks_per_seq = max_blocks;
  }
};

std::vector<Case> cases() {
  const DType F32 = DType::F32, BF16 = DType::BF16, F16 = DType::F16;
  return {
      // single sequences: first prefill chunk, chunked prefill tail, decode
      {{{37, 37}}, 1, 1, 8, 4, F32},
      {{{100, 163}}, 4, 2, 64, 16, F32},
      {{{1, 1}}, 8, 1, 16, 1, BF16},
      {{{1, 333}}, 6, 3, 80, 32, F16},
      {{{64, 64}}, 8, 1, 128, 16, BF16},
      // mixed batches of prefill chunks and decode rows
      {{{100, 163}, {1, 50}, {1, 1}, {17, 17}}, 4, 2, 64, 16, F32},
      {{{23, 300}, {1, 33}, {5, 5}}, 6, 3, 80, 4, BF16},
      {{{1, 777}, {64, 130}}, 8, 1, 128, 32, F16},
      {{{3, 10}, {0, 9}, {1, 45}}, 4, 4, 16, 1, F32},
      {{{50, 97}, {1, 1}}, 1, 1, 128, 4, F16},
      {{{9, 9}, {1, 200}, {31, 31}, {1, 2}}, 8, 1, 8, 16, BF16},
      {{{77, 1000}, {2, 40}}, 6, 3, 64, 32, F32},
      {{{13, 29}}, 4, 4, 80, 1, F16},
      {{{1, 17}, {1, 18}, {1, 31}, {1, 65}}, 4, 2, 16, 4, BF16},
      {{{99, 99}, {1, 123}}, 4, 2, 8, 32, F32},
      {{{45, 61}, {1, 5}, {7, 8}}, 1, 1, 64, 1, BF16},
      {{{16, 48}, {33, 33}}, 6, 3, 128, 4, F32},
      // peaky softmax rows stress the running-max rescaling
      {{{60, 150}, {1, 600}}, 4, 2, 64, 16, F32, 8.0f},
      {{{1, 300}, {20, 90}}, 8, 1, 16, 4, BF16, 12.0f},
      {{{70, 400}, {1, 1000}}, 4, 2, 64, 16, F32, 1.0f, 20.0f},
      {{{1, 2000}, {33, 70}}, 6, 3, 16, 4, F16, 1.0f, -30.0f},
      // long decode rows: split-K with its merge
      {{{1, 2500}}, 8, 1, 64, 16, F32},
      {{{1, 1500}, {1, 900}}, 6, 3, 80, 32, BF16},
      {{{1, 3001}}, 4, 2, 128, 4, F16, 6.0f},
      {{{2, 1200}}, 4, 4, 16, 1, F32},
  };
}

// Largest |opt - ref| over each output row, relative to the row's largest |ref|.
double max_rel_error(const std::vector<float>& opt, const std::vector<float>& ref, int D) {
  double worst = 0;
  for (size_t r = 0; r < ref.size(); r += D) {
    double scale = 1e-30, diff = 0;
    for (int d = 0; d < D; ++d) {
      scale = std::max(scale, std::abs(static_cast<double>(ref[r + d])));
      const double e = std::abs(static_cast<double>(opt[r + d]) - ref[r + d]);
      diff = std::isnan(e) ? INFINITY : std::max(diff, e);
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

void check_case(const Case& c, size_t index, const attn::TileOps& ops) {
  PagedBatch pb(c, 1234 + static_cast<uint32_t>(index));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  std::vector<float> ref(pb.q.size(), NAN), opt(pb.q.size(), NAN);
  paged_attention_ref(pb.q.data(), c.H, pb.kv, pb.batch, scale, ref.data());
  attn::paged_attention_with(ops, pb.q.data(), c.H, pb.kv, pb.batch, scale, opt.data());
  const double err = max_rel_error(opt, ref, c.D);
  EXPECT_LT(err, 1e-5) << "case " << index << " (" << ops.name << "): H=" << c.H
                       << " Hkv=" << c.Hkv << " D=" << c.D << " B=" << c.B
                       << " dtype=" << dtype_name(c.dtype);
}

std::vector<const attn::TileOps*> all_tile_ops() {
  std::vector<const attn::TileOps*> ops{&attn::tile_ops_generic()};
  if (attn::tile_ops_avx512()) ops.push_back(attn::tile_ops_avx512());
  return ops;
}

TEST(PagedAttention, MatchesReference) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const auto table = cases();
    for (size_t i = 0; i < table.size(); ++i)
      for (const auto* ops : all_tile_ops()) check_case(table[i], i, *ops);
  }
  set_num_threads(2);
}

TEST(PagedAttention, PublicEntryUsesBestTiles) {
  const Case c{{{40, 100}, {1, 700}}, 4, 2, 64, 16, DType::BF16};
  PagedBatch pb(c, 7);
  std::vector<float> ref(pb.q.size()), opt(pb.q.size(), NAN);
  paged_attention_ref(pb.q.data(), c.H, pb.kv, pb.batch, 0.125f, ref.data());
  paged_attention(pb.q.data(), c.H, pb.kv, pb.batch, 0.125f, opt.data());
  EXPECT_LT(max_rel_error(opt, ref, c.D), 1e-5);
}

// ---- the bf16 dot-product tiles (set_bf16_attention) ------------------------------------------

// The table's cases whose cache the bf16 tiles take (head dim a multiple of 32), as BF16 caches.
std::vector<Case> bf16_tile_cases() {
  std::vector<Case> out;
  for (Case c : cases())
    if (c.D % 32 == 0) {
      c.dtype = DType::BF16;
      out.push_back(c);
    }
  return out;
}

// Largest |opt - ref| over all outputs.
double max_abs_error(const std::vector<float>& opt, const std::vector<float>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::abs(static_cast<double>(opt[i]) - ref[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// Against the naive reference given the bf16-rounded q (K and V are stored in bf16: exact). What
// remains is the rounding of each probability to bf16 (relative 2^-9), so each output is off by
// at most 2^-9 * max |v| (|v| <= 1 here; seen: up to 1.3e-3) plus f32 sums: a layout or pairing slip gives O(1).
TEST(PagedAttentionBf16Tiles, MatchReferenceOnBf16RoundedQueries) {
  const attn::TileOps* ops = attn::tile_ops_avx512_bf16();
  if (!ops) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const auto table = bf16_tile_cases();
    ASSERT_GE(table.size(), 8u);
    for (size_t i = 0; i < table.size(); ++i) {
      const Case& c = table[i];
      PagedBatch pb(c, 99 + static_cast<uint32_t>(i));
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      // The tiles round q * qscale (qscale = scale * log2(e): scores in the log2 domain) to bf16;
      // the reference gets those values divided back by qscale (off by f32 rounding only).
      const float qscale = scale * std::numbers::log2e_v<float>;
      std::vector<float> qb(pb.q);
      for (auto& x : qb) x = bf16_to_f32(f32_to_bf16(x * qscale)) / qscale;
      std::vector<float> ref(pb.q.size(), NAN), opt(pb.q.size(), NAN);
      paged_attention_ref(qb.data(), c.H, pb.kv, pb.batch, scale, ref.data());
      attn::paged_attention_with(*ops, pb.q.data(), c.H, pb.kv, pb.batch, scale, opt.data());
      EXPECT_LT(max_abs_error(opt, ref), 2.5e-3) << "case " << i << ": H=" << c.H << " Hkv=" << c.Hkv
                                               << " D=" << c.D << " B=" << c.B;
    }
  }
  set_num_threads(2);
}

// The approximation's error against the exact path (the f32 tiles on the same bf16 cache), measured.
TEST(PagedAttentionBf16Tiles, ErrorAgainstExactPathIsMeasured) {
  const attn::TileOps* ops = attn::tile_ops_avx512_bf16();
  if (!ops) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  double worst_rel = 0, worst_abs = 0;
  const auto table = bf16_tile_cases();
  for (size_t i = 0; i < table.size(); ++i) {
    const Case& c = table[i];
    PagedBatch pb(c, 500 + static_cast<uint32_t>(i));
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    std::vector<float> exact(pb.q.size(), NAN), opt(pb.q.size(), NAN);
    attn::paged_attention_with(attn::tile_ops_best(), pb.q.data(), c.H, pb.kv, pb.batch, scale, exact.data());
    attn::paged_attention_with(*ops, pb.q.data(), c.H, pb.kv, pb.batch, scale, opt.data());
    worst_rel = std::max(worst_rel, max_rel_error(opt, exact, c.D));
    worst_abs = std::max(worst_abs, max_abs_error(opt, exact));
  }
  RecordProperty("bf16_tiles_max_row_rel_err", std::to_string(worst_rel));
  std::printf("[ measured ] bf16 attention tiles vs exact f32 tiles (bf16 cache): max row relative error %.4g, "
              "max abs error %.4g\n", worst_rel, worst_abs);
  EXPECT_LT(worst_abs, 2e-2);
  EXPECT_GT(worst_abs, 0.0) << "the bf16 tiles should round q and p";
}

// The switch: paged_attention runs the bf16 tiles only when it is on and the cache fits them.
TEST(PagedAttentionBf16Tiles, SwitchPicksTilesByCache) {
  const attn::TileOps* ops = attn::tile_ops_avx512_bf16();
  if (!ops) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const bool old = bf16_attention();
  for (const Case& c : {Case{{{1, 300}, {9, 40}}, 4, 2, 64, 16, DType::BF16},
                        Case{{{1, 300}}, 4, 2, 64, 16, DType::F32},
                        Case{{{1, 300}}, 4, 2, 80, 16, DType::BF16}}) {
    PagedBatch pb(c, 3);
    std::vector<float> via_switch(pb.q.size()), bf16(pb.q.size()), f32(pb.q.size());
    attn::paged_attention_with(*ops, pb.q.data(), c.H, pb.kv, pb.batch, 0.125f, bf16.data());
    attn::paged_attention_with(attn::tile_ops_best(), pb.q.data(), c.H, pb.kv, pb.batch, 0.125f, f32.data());
    for (bool on : {false, true}) {
      set_bf16_attention(on);
      paged_attention(pb.q.data(), c.H, pb.kv, pb.batch, 0.125f, via_switch.data());
      const bool want_bf16 = on && c.dtype == DType::BF16 && c.D % 32 == 0;
      EXPECT_EQ(via_switch, want_bf16 ? bf16 : f32) << "on=" << on << " D=" << c.D << " " << dtype_name(c.dtype);
    }
  }
  set_bf16_attention(old);
}

// A cache of one sequence whose token j lives in block table[j / B]: the keys/values given
// contiguously as [S, Hkv, D] are scattered through write_kv.
struct TinyCache {
  std::vector<float> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> table;
  TinyCache(const std::vector<float>& k, const std::vector<float>& v, int S, int Hkv, int D,
            int B, std::vector<int32_t> blocks)
      : table(std::move(blocks)) {
    kv.num_blocks = static_cast<int64_t>(table.size()) + 2;
    kv.block_size = B;
    kv.num_kv_heads = Hkv;
    kv.head_dim = D;
    kbuf.assign(static_cast<size_t>(kv.num_blocks * kv.block_stride()), NAN);
    vbuf = kbuf;
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    std::vector<int32_t> slots;
    for (int j = 0; j < S; ++j) slots.push_back(table[j / B] * B + j % B);
    write_kv(kv, k.data(), v.data(), slots.data(), S);
  }
};

TEST(PagedAttentionRef, MatchesDenseAttentionByHand) {
  // S = 5 tokens, the last q_len = 3 are queries; H = 2 query heads share Hkv = 1; D = 4; B = 2
  // with blocks out of order.
  const int S = 5, q_len = 3, H = 2, D = 4;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> k(S * D), v(S * D), q(q_len * H * D);
  for (auto* x : {&k, &v, &q})
    for (auto& e : *x) e = 2.0f * uni(rng);
  TinyCache cache(k, v, S, 1, D, 2, {3, 0, 2});
  const int32_t cu[2] = {0, q_len}, ctx[1] = {S};
  const AttentionBatch batch{1, cu, ctx, cache.table.data(), 3};
  const float scale = 0.5f;
  std::vector<float> out(q.size());
  paged_attention_ref(q.data(), H, cache.kv, batch, scale, out.data());

  // Dense causal attention over the contiguous k, v: row i sits at position S - q_len + i.
  for (int i = 0; i < q_len; ++i)
    for (int h = 0; h < H; ++h) {
      const int pos = S - q_len + i;
      std::vector<double> w(pos + 1);
      double total = 0;
      for (int j = 0; j <= pos; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double(q[(i * H + h) * D + d]) * k[j * D + d];
        w[j] = std::exp(scale * dot);
        total += w[j];
      }
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int j = 0; j <= pos; ++j) o += w[j] / total * v[j * D + d];
        EXPECT_NEAR(out[(i * H + h) * D + d], o, 1e-6) << "row " << i << " head " << h;
      }
    }
}

TEST(PagedAttentionRef, KnownValues) {
  // Four tokens, D = 2, v[j] = (2j + 1, 2j + 2). A zero query weighs its visible keys equally:
  // the row at position 2 averages v[0..2] = (3, 4), the row at position 3 v[0..3] = (4, 5).
  // A query aligned with a single large key picks that key's value.
  const std::vector<float> k = {1, 0, 0, 1, -1, 0, 0, -1};
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  TinyCache cache(k, v, 4, 1, 2, 1, {2, 0, 3, 1});
  const int32_t cu[2] = {0, 2}, ctx[1] = {4};
  const AttentionBatch batch{1, cu, ctx, cache.table.data(), 4};
  std::vector<float> q = {0, 0, 0, 0}, out(4);
  paged_attention_ref(q.data(), 1, cache.kv, batch, 1.0f, out.data());
  EXPECT_NEAR(out[0], 3.0f, 1e-6);
  EXPECT_NEAR(out[1], 4.0f, 1e-6);
  EXPECT_NEAR(out[2], 4.0f, 1e-6);
  EXPECT_NEAR(out[3], 5.0f, 1e-6);
  q = {0, 0, 0, -60};  // second row: only key 3 = (0, -1) scores high
  paged_attention_ref(q.data(), 1, cache.kv, batch, 1.0f, out.data());
  EXPECT_NEAR(out[2], 7.0f, 1e-6);
  EXPECT_NEAR(out[3], 8.0f, 1e-6);
}

TEST(PagedAttention, RejectsBadArguments) {
  const Case c{{{4, 10}}, 4, 2, 16, 4, DType::F32};
  PagedBatch pb(c, 3);
  std::vector<float> out(pb.q.size());
  auto run = [&](int H) { paged_attention(pb.q.data(), H, pb.kv, pb.batch, 1.0f, out.data()); };
  EXPECT_THROW(run(3), InternalError);  // H % Hkv != 0
  pb.ctx[0] = 3;                        // context_len < q_len
  EXPECT_THROW(run(4), InternalError);
  pb.ctx[0] = 10;
  pb.tables[1] = static_cast<int32_t>(pb.kv.num_blocks);  // block id out of range
  EXPECT_THROW(run(4), InternalError);
  EXPECT_THROW(paged_attention_ref(pb.q.data(), 4, pb.kv, pb.batch, 1.0f, out.data()),
               InternalError);
}

float round_trip(float x, DType t) {
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  return x;
}

TEST(WriteKV, SlotsRoundTripAndMinusOneIsSkipped) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    PagedKVLayer kv;
    kv.dtype = t;
    kv.num_blocks = 5;
    kv.block_size = 4;
    kv.num_kv_heads = 3;
    kv.head_dim = 6;
    const int64_t n = kv.num_blocks * kv.block_stride();
    std::vector<uint8_t> kbuf(n * dtype_size(t), 0), vbuf(kbuf);
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    const int64_t T = 7;
    const std::vector<int32_t> slots = {13, -1, 0, 19, 4, -1, 7};
    std::vector<float> k(T * 18), v(T * 18);
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = 0.37f * static_cast<float>(i) + 0.011f;
      v[i] = -1.3f * static_cast<float>(i) - 0.07f;
    }
    write_kv(kv, k.data(), v.data(), slots.data(), T);
    std::vector<bool> written(n, false);
    for (int64_t tok = 0; tok < T; ++tok) {
      if (slots[tok] < 0) continue;
      const int64_t block = slots[tok] / 4, off = slots[tok] % 4;
      for (int h = 0; h < 3; ++h)
        for (int d = 0; d < 6; ++d) {
          const int64_t e = block * kv.block_stride() + h * kv.head_stride() + off * 6 + d;
          const int64_t src = (tok * 3 + h) * 6 + d;
          EXPECT_EQ(load_as_f32(kv.k, t, e), round_trip(k[src], t)) << dtype_name(t);
          EXPECT_EQ(load_as_f32(kv.v, t, e), round_trip(v[src], t)) << dtype_name(t);
          written[e] = true;
        }
    }
    for (int64_t e = 0; e < n; ++e)  // every other slot, including the -1 tokens', untouched
      if (!written[e]) {
        ASSERT_EQ(load_as_f32(kv.k, t, e), 0.0f);
        ASSERT_EQ(load_as_f32(kv.v, t, e), 0.0f);
      }
    const int32_t bad[1] = {20};  // num_blocks * B
    EXPECT_THROW(write_kv(kv, k.data(), v.data(), bad, 1), InternalError);
  }
}

}  // namespace
}  // namespace vlm
