// bf16 dot-product tile kernels of paged_attention (attn::tile_ops_avx512_bf16): for a BF16
// cache, q·k and p·v run on vdpbf16ps (32 bf16 products per instruction, f32 sums) over K and V
// as stored, instead of converting every key tile to f32 (the f32 tiles' load_kv). An
// approximation: q is rounded to bf16 once per key range and each tile's probabilities p once;
// K and V are exact (stored in bf16). Switched by set_bf16_attention (paged_attention.h).
//
// Formats inside the TileOps buffers (head_dim D a multiple of 32, so Dp = D):
//  - qt row m: D / 2 dwords, dword i = (bf16 q[2i], bf16 q[2i + 1]) (low half first);
//  - kt: [D / 2, KT] dwords, kt[i * KT + j] = dims (2i, 2i + 1) of key j: each K row's dwords
//    transposed by 16x16 blocks, so that one vector holds one dim pair of 16 keys;
//  - vrows[j]: the cache's own bf16 row of key j (not f32), D elements;
//  - p · v: keys are taken in pairs (j, j + 1): a vpermt2w interleaves the two V rows into
//    (v[j][d], v[j + 1][d]) dwords for 16 dims, multiplied by the broadcast pair (p_j, p_j+1).
#include <algorithm>

#include "kernels/attention/attention_tile_avx512.h"
#include "kernels/core/cpu_features.h"

#define VLM_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace vlm::attn {
namespace {

constexpr int KT = kKeyTile;

// 32 f32 at src -> 32 bf16 (round to nearest even) as 16 dwords.
VLM_BF16 inline __m512i round32(const float* src) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16), _mm512_loadu_ps(src));
}

VLM_BF16 void prepare_q_bf16(float* qt /*[M,Dp]*/, int M, int Dp) {
  for (int m = 0; m < M; ++m) {
    float* row = qt + static_cast<int64_t>(m) * Dp;
    for (int c = 0; c < Dp; c += 32) {  // dwords [c/2, c/2 + 16) <- floats [c, c + 32): in place
      const __m512i b = round32(row + c);
      _mm512_storeu_si512(row + c / 2, b);
    }
  }
}

VLM_BF16 void load_kv_bf16(const PagedKVLayer& kv, const int32_t* block_row, int kvh, int k0, int n,
                           int /*Dp*/, float* kt /*[D/2,KT] dwords*/, float* /*vbuf*/,
                           const float** vrows /*[KT] bf16 rows*/) {
  const uint8_t* krows[KT];
  const uint8_t* vsrc[KT];
  gather_kv_rows(kv, block_row, kvh, k0, n, 2, krows, vsrc);
  const int D2 = kv.head_dim / 2;
  for (int j0 = 0; j0 < n; j0 += 16)
    for (int d0 = 0; d0 < D2; d0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(krows[j0 + i]) + d0);
      transpose16_store(r, kt + d0 * KT + j0, KT);
    }
  for (int j = 0; j < n; ++j) vrows[j] = reinterpret_cast<const float*>(vsrc[j]);
}

// s[r, 16c + x] = sum_i dpbf16(q pair i of row r, kt[i, 16c + x]) for R rows, NC 16-key chunks.
template <int R, int NC>
VLM_BF16 void scores_block_bf16(const uint32_t* q, int D2q, int D2, const uint32_t* kt, float* s,
                               PrefetchLines* pf) {
  __m512 acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int i = 0; i < D2; ++i) {
    if (pf) pf->issue(2);
    __m512bh k[NC];
    for (int c = 0; c < NC; ++c) k[c] = (__m512bh)_mm512_loadu_si512(kt + i * KT + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int>(q[r * D2q + i]));
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], qb, k[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(s + r * KT + 16 * c, acc[r][c]);
}

template <int NC>
VLM_BF16 void scores_rows_bf16(const uint32_t* q, int M, int Dp, const uint32_t* kt, float* s,
                              PrefetchLines* pf) {
  constexpr int RM = NC == 1 ? 12 : 8;  // rows per register block
  const int D2q = Dp, D2 = Dp / 2;      // a q row keeps its Dp-float stride
  int m = 0;
  for (; m + RM <= M; m += RM) scores_block_bf16<RM, NC>(q + m * D2q, D2q, D2, kt, s + m * KT, pf);
  const uint32_t* qm = q + m * D2q;
  float* sm = s + m * KT;
  switch (M - m) {
    case 0: break;
#define VLM_CASE(r) case r: scores_block_bf16<r, NC>(qm, D2q, D2, kt, sm, pf); break;
    VLM_CASE(1) VLM_CASE(2) VLM_CASE(3) VLM_CASE(4) VLM_CASE(5) VLM_CASE(6) VLM_CASE(7)
    VLM_CASE(8) VLM_CASE(9) VLM_CASE(10) VLM_CASE(11)
#undef VLM_CASE
  }
}

VLM_BF16 void scores_bf16(const float* q /*[M,Dp] bf16 pairs*/, int M, int Dp, const float* kt, int n,
                          float* s /*[M,KT]*/, PrefetchLines* pf) {
  const auto* qd = reinterpret_cast<const uint32_t*>(q);
  const auto* kd = reinterpret_cast<const uint32_t*>(kt);
  if (n <= 16) scores_rows_bf16<1>(qd, M, Dp, kd, s, pf);
  else scores_rows_bf16<2>(qd, M, Dp, kd, s, pf);
}

// acc[r, d0 + 32h + x] += sum over key pairs of dpbf16((p_j, p_j+1), (v[j][.], v[j+1][.])) for R
// rows, the 32 dims [d0, d0 + 32) (two accumulators of 16). p2 rows: KT / 2 dwords.
template <int R>
VLM_BF16 void pv_block_bf16(const uint32_t* p2, int npairs, int nk, const uint16_t* const* v, int d0, int Dp,
                            float* acc, PrefetchLines* pf) {
  const __m512i idx_lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                          39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  __m512 a[R][2];
  for (int r = 0; r < R; ++r) {
    a[r][0] = _mm512_loadu_ps(acc + r * Dp + d0);
    a[r][1] = _mm512_loadu_ps(acc + r * Dp + d0 + 16);
  }
  for (int jj = 0; jj < npairs; ++jj) {
    if (pf) pf->issue(4);
    const int j = 2 * jj;
    const uint16_t* v1 = j + 1 < nk ? v[j + 1] : v[j];  // its p is 0
    const __m512i x0 = _mm512_loadu_si512(v[j] + d0), x1 = _mm512_loadu_si512(v1 + d0);
    const __m512bh lo = (__m512bh)_mm512_permutex2var_epi16(x0, idx_lo, x1);
    const __m512bh hi = (__m512bh)_mm512_permutex2var_epi16(x0, idx_hi, x1);
    for (int r = 0; r < R; ++r) {
      const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int>(p2[r * (KT / 2) + jj]));
      a[r][0] = _mm512_dpbf16_ps(a[r][0], pb, lo);
      a[r][1] = _mm512_dpbf16_ps(a[r][1], pb, hi);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(acc + r * Dp + d0, a[r][0]);
    _mm512_storeu_ps(acc + r * Dp + d0 + 16, a[r][1]);
  }
}

VLM_BF16 void pv_bf16(const float* p /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
                      const float* const* vrows /*[KT] bf16 rows*/, float* acc /*[M,Dp]*/,
                      PrefetchLines* pf) {
  constexpr int RM = 8;  // rows per register block: 8 x 2 accumulators
  static_assert(KT == 32, "one 32-float p row rounds into 16 dwords");
  const auto* v = reinterpret_cast<const uint16_t* const*>(vrows);
  for (int m = 0; m < M; m += RM) {
    const int rows = std::min(RM, M - m);
    const int nk = *std::max_element(nvalid + m, nvalid + m + rows);  // p is 0 beyond nvalid
    if (nk <= 0) continue;
    alignas(64) uint32_t p2[RM * KT / 2];
    for (int r = 0; r < rows; ++r) _mm512_store_si512(p2 + r * (KT / 2), round32(p + (m + r) * KT));
    const int npairs = (nk + 1) / 2;
    float* am = acc + static_cast<int64_t>(m) * Dp;
    for (int d0 = 0; d0 < Dp; d0 += 32) switch (rows) {
#define VLM_CASE(r) case r: pv_block_bf16<r>(p2, npairs, nk, v, d0, Dp, am, pf); break;
        VLM_CASE(1) VLM_CASE(2) VLM_CASE(3) VLM_CASE(4) VLM_CASE(5) VLM_CASE(6) VLM_CASE(7)
        default: pv_block_bf16<8>(p2, npairs, nk, v, d0, Dp, am, pf);
#undef VLM_CASE
      }
  }
}

}  // namespace

const TileOps* tile_ops_avx512_bf16() {
  static const TileOps ops{"avx512_bf16", prepare_q_bf16, load_kv_bf16, scores_bf16, softmax_avx512, pv_bf16};
  return use_avx512() && cpu_has_avx512_bf16() ? &ops : nullptr;
}

}  // namespace vlm::attn
