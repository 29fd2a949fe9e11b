#include "kernels/attention/key_range.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/aligned_scratch.h"

namespace vlm::attn {
namespace {

constexpr int KT = kKeyTile;

// Per-thread tile buffers, 64-byte aligned; grown on demand, kept across calls.
struct Scratch : AlignedScratch {
  std::vector<int> nvalid;
  float* s = nullptr;     // [M, KT] scores
  float* kt = nullptr;    // [Dp, KT] keys, transposed
  float* vbuf = nullptr;  // [KT, Dp] values converted to f32
  PrefetchLines pf;       // the lines of the tile kPrefetchTiles ahead
};
thread_local Scratch tls_scratch;

inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

// Key tiles requested ahead of the one computed.
// Into L2 (prefetcht1), 4 tiles ahead: against 1 tile into L1, ~20 % less CPU time per cold
// 4K/32K decode row (bench_attention BM_DecodeCold/bf16_dot_tiles, CPU time at load ~2-6).
// A tile's requests go out from inside the tile kernels' loops (PrefetchLines), not in one burst:
// 4K decode rows from memory ~25 % faster (bench/RESULTS.md, issue 24, branch cpu-decode4).
constexpr int kPrefetchTiles = 4;

// The cache lines of keys [k0, k0 + n) of kv head kvh (K and V), as pf's list (replacing it),
// so that a later key tile streams in while this one is computed: blocks are scattered, which
// hardware prefetch misses. Lines beyond pf's capacity are left out.
void list_key_lines(const PagedKVLayer& kv, const int32_t* table, int kvh, int k0, int n,
                    PrefetchLines& pf) {
  const int64_t esize = static_cast<int64_t>(dtype_size(kv.dtype));
  const int64_t row_bytes = kv.head_dim * esize;
  pf.n = pf.next = 0;
  for (int j = k0; j < k0 + n;) {  // one run of consecutive slots of one block at a time
    const int run = std::min(k0 + n - j, kv.block_size - j % kv.block_size);
    const int64_t off = (table[j / kv.block_size] * kv.block_stride() + kvh * kv.head_stride() +
                         static_cast<int64_t>(j % kv.block_size) * kv.head_dim) * esize;
    for (int64_t b = 0; b < run * row_bytes && pf.n + 2 <= PrefetchLines::kCapacity; b += 64) {
      pf.line[pf.n++] = static_cast<const char*>(kv.k) + off + b;
      pf.line[pf.n++] = static_cast<const char*>(kv.v) + off + b;
    }
    j += run;
  }
}

}  // namespace

float KeyRangeState::total(int m) const {
  float sum = 0.0f;
  for (int i = 0; i < kSumLanes; ++i) sum += l_run[m * kSumLanes + i];
  return sum;
}

KeyRangeState begin_key_range(const TileOps& ops, const float* q /*[T,H,D]*/, int H, int D, int Dp, int64_t t0,
                              int rows, int kvh, int G, float qscale) {
  const int M = rows * G;
  Scratch& sc = tls_scratch;
  const size_t nq = round16(static_cast<size_t>(M) * Dp), ns = round16(static_cast<size_t>(M) * KT);
  const size_t nkv = static_cast<size_t>(KT) * Dp, nm = round16(M);
  const size_t nl = static_cast<size_t>(M) * kSumLanes;
  KeyRangeState st;
  st.M = M;
  st.Dp = Dp;
  st.qt = sc.get(2 * nq + ns + 2 * nkv + nm + nl);
  st.acc = st.qt + nq;
  sc.s = st.acc + nq;
  sc.kt = sc.s + ns;
  sc.vbuf = sc.kt + nkv;
  st.m_run = sc.vbuf + nkv;
  st.l_run = st.m_run + nm;
  sc.nvalid.resize(M);

  std::fill(sc.vbuf, sc.vbuf + nkv, 0.0f);  // zero head-dim padding
  std::fill(st.acc, st.acc + static_cast<size_t>(M) * Dp, 0.0f);
  std::fill(st.m_run, st.m_run + M, -INFINITY);
  std::fill(st.l_run, st.l_run + nl, 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < G; ++g) {
      const float* src = q + ((t0 + r) * H + kvh * G + g) * D;
      float* dst = st.qt + static_cast<size_t>(r * G + g) * Dp;
      for (int d = 0; d < D; ++d) dst[d] = src[d] * qscale;
      std::fill(dst + D, dst + Dp, 0.0f);
    }
  if (ops.prepare_q) ops.prepare_q(st.qt, M, Dp);
  return st;
}

void run_key_range(const TileOps& ops, const PagedKVLayer& kv, const int32_t* block_row, int kvh,
                   int k_begin, int k_end, int G, int first_pos, KeyRangeState& st) {
  Scratch& sc = tls_scratch;
  const int M = st.M, Dp = st.Dp, rows = M / G;
  int* nvalid = sc.nvalid.data();
  const float* vrows[KT];
  const int ahead = kPrefetchTiles * KT;
  PrefetchLines& pf = sc.pf;
  for (int k0 = k_begin; k0 < std::min(k_end, k_begin + ahead); k0 += KT) {  // the first tiles at once
    list_key_lines(kv, block_row, kvh, k0, std::min(KT, k_end - k0), pf);
    pf.issue_all();
  }
  for (int k0 = k_begin; k0 < k_end; k0 += KT) {
    const int n = std::min(KT, k_end - k0);
    for (int r = 0; r < rows; ++r) {  // causal mask: row r sees keys <= first_pos + r
      const int nv = first_pos < 0 ? n : std::clamp(first_pos + r - k0 + 1, 0, n);
      std::fill(nvalid + r * G, nvalid + (r + 1) * G, nv);
    }
    pf.n = pf.next = 0;
    if (k0 + ahead < k_end) list_key_lines(kv, block_row, kvh, k0 + ahead, std::min(KT, k_end - k0 - ahead), pf);
    ops.load_kv(kv, block_row, kvh, k0, n, Dp, sc.kt, sc.vbuf, vrows);
    ops.scores(st.qt, M, Dp, sc.kt, n, sc.s, &pf);
    ops.softmax(sc.s, nvalid, M, Dp, st.m_run, st.l_run, st.acc);
    ops.pv(sc.s, nvalid, M, Dp, vrows, st.acc, &pf);
    pf.issue_all();  // what the tile kernels left
  }
}

void store_normalized(const KeyRangeState& st, int m, int D, float* o /*[D]*/) {
  const float inv = 1.0f / st.total(m);
  const float* a = st.acc + static_cast<size_t>(m) * st.Dp;
  for (int d = 0; d < D; ++d) o[d] = a[d] * inv;
}

void store_partial(const KeyRangeState& st, float* p /*[M * (Dp + 2)]*/) {
  const size_t M = static_cast<size_t>(st.M);
  std::copy(st.acc, st.acc + M * st.Dp, p);
  std::copy(st.m_run, st.m_run + M, p + M * st.Dp);
  for (size_t m = 0; m < M; ++m) p[M * (st.Dp + 1) + m] = st.total(static_cast<int>(m));
}

void merge_partials(const float* base, int num_parts, int M, int Dp, int D, int m, float* o /*[D]*/) {
  const int64_t stride = static_cast<int64_t>(M) * (Dp + 2);
  const int64_t m_at = static_cast<int64_t>(M) * Dp + m, l_at = static_cast<int64_t>(M) * (Dp + 1) + m;
  float mt = -INFINITY;
  for (int p = 0; p < num_parts; ++p) mt = std::max(mt, base[p * stride + m_at]);
  float l = 0.0f;
  std::fill(o, o + D, 0.0f);
  for (int p = 0; p < num_parts; ++p) {
    const float* part = base + p * stride;
    if (part[m_at] == -INFINITY) continue;  // no valid key of this row in this part
    const float w = std::exp2(part[m_at] - mt);
    l += w * part[l_at];
    for (int d = 0; d < D; ++d) o[d] += w * part[static_cast<int64_t>(m) * Dp + d];
  }
  const float inv = 1.0f / l;
  for (int d = 0; d < D; ++d) o[d] *= inv;
}

}  // namespace vlm::attn
