// AVX-512 tile kernels of paged_attention. Every function carries the target attribute and is
// only reached after a run-time CPU check (tile_ops_avx512), so the binary stays portable.
//
// Register blocking: scores keep R query vectors x NC 16-key chunks in zmm accumulators and
// stream the transposed key tile; pv keeps R rows x C 16-float chunks of acc and streams V.
#include <algorithm>
#include <cmath>

#include "kernels/attention/attention_tile_avx512.h"
#include "kernels/core/cpu_features.h"

namespace vlm::attn {
namespace {

constexpr int KT = kKeyTile;

// ---- loading -------------------------------------------------------------------------------

// 16 stored elements [d, d + 16) of a row as f32 (masked lanes read as 0).
template <DType T>
VLM_AVX512 inline __m512 load16(const uint8_t* row, int d, __mmask16 mk) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(row) + d);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(row) + d);
    if constexpr (T == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

// Transposes a 16x16 block: elements [d0, d0 + 16) of the 16 rows become the 16 rows
// dst[x * ds + i] = rows[i][d0 + x] (masked elements give 0).
template <DType T>
VLM_AVX512 void transpose16(const uint8_t* const* rows, int d0, __mmask16 mk, float* dst,
                            int ds) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = load16<T>(rows[i], d0, mk);
  transpose16_store(r, dst, ds);
}

template <DType T>
VLM_AVX512 void load_kv_typed(const PagedKVLayer& kv, const int32_t* block_row, int kvh, int k0,
                              int n, int Dp, float* kt, float* vbuf, const float** vrows) {
  const int D = kv.head_dim;
  constexpr int64_t esize = T == DType::F32 ? 4 : 2;
  const uint8_t* krows[KT];
  const uint8_t* vsrc[KT];
  gather_kv_rows(kv, block_row, kvh, k0, n, esize, krows, vsrc);
  for (int j0 = 0; j0 < n; j0 += 16)
    for (int d0 = 0; d0 < Dp; d0 += 16)
      transpose16<T>(krows + j0, d0, head_mask(D - d0), kt + d0 * KT + j0, KT);

  if (T == DType::F32 && D == Dp) {  // whole 16-float chunks: read V in place
    for (int j = 0; j < n; ++j) vrows[j] = reinterpret_cast<const float*>(vsrc[j]);
    return;
  }
  for (int j = 0; j < n; ++j) {
    float* dst = vbuf + j * Dp;
    for (int d = 0; d < D; d += 16) {
      const __mmask16 mk = head_mask(D - d);
      _mm512_mask_storeu_ps(dst + d, mk, load16<T>(vsrc[j], d, mk));
    }
    vrows[j] = dst;
  }
}

VLM_AVX512 void load_kv_avx512(const PagedKVLayer& kv, const int32_t* block_row, int kvh, int k0,
                               int n, int Dp, float* kt /*[Dp,KT]*/, float* vbuf /*[KT,Dp]*/,
                               const float** vrows /*[KT]*/) {
  switch (kv.dtype) {
    case DType::BF16: load_kv_typed<DType::BF16>(kv, block_row, kvh, k0, n, Dp, kt, vbuf, vrows);
      break;
    case DType::F16: load_kv_typed<DType::F16>(kv, block_row, kvh, k0, n, Dp, kt, vbuf, vrows);
      break;
    default: load_kv_typed<DType::F32>(kv, block_row, kvh, k0, n, Dp, kt, vbuf, vrows);
  }
}

// ---- scores --------------------------------------------------------------------------------

template <int R, int NC>
VLM_AVX512 void scores_block(const float* q, int Dp, const float* kt, float* s, PrefetchLines* pf) {
  __m512 acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int d = 0; d < Dp; ++d) {
    if (pf) pf->issue(2);
    __m512 k[NC];
    for (int c = 0; c < NC; ++c) k[c] = _mm512_loadu_ps(kt + d * KT + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 qb = _mm512_set1_ps(q[r * Dp + d]);
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(qb, k[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(s + r * KT + 16 * c, acc[r][c]);
}

template <int NC>
VLM_AVX512 void scores_rows(const float* q, int M, int Dp, const float* kt, float* s, PrefetchLines* pf) {
  constexpr int RM = NC == 1 ? 12 : 8;  // rows per register block
  int m = 0;
  for (; m + RM <= M; m += RM) scores_block<RM, NC>(q + m * Dp, Dp, kt, s + m * KT, pf);
  const float* qm = q + m * Dp;
  float* sm = s + m * KT;
  switch (M - m) {
    case 0: break;
#define VLM_CASE(r) case r: scores_block<r, NC>(qm, Dp, kt, sm, pf); break;
    VLM_CASE(1) VLM_CASE(2) VLM_CASE(3) VLM_CASE(4) VLM_CASE(5) VLM_CASE(6) VLM_CASE(7)
    VLM_CASE(8) VLM_CASE(9) VLM_CASE(10) VLM_CASE(11)
#undef VLM_CASE
  }
}

VLM_AVX512 void scores_avx512(const float* q /*[M,Dp]*/, int M, int Dp,
                              const float* kt /*[Dp,KT]*/, int n, float* s /*[M,KT]*/,
                              PrefetchLines* pf) {
  if (n <= 16) scores_rows<1>(q, M, Dp, kt, s, pf);
  else scores_rows<2>(q, M, Dp, kt, s, pf);
}

// ---- softmax -------------------------------------------------------------------------------

constexpr float taylor_exp2_coef(int k) {  // ln(2)^k / k!
  double c = 1.0;
  for (int i = 1; i <= k; ++i) c *= 0.69314718055994530942 / i;
  return static_cast<float>(c);
}

// 2^x for x <= 0 (x below -150 gives 0): x = n + f with |f| <= 1/2, 2^f by its degree-7 Taylor
// polynomial (relative error < 1e-8 before rounding), scaled by 2^n.
VLM_AVX512 __m512 exp2_nonpos(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(taylor_exp2_coef(7));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(taylor_exp2_coef(6)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(taylor_exp2_coef(5)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(taylor_exp2_coef(4)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(taylor_exp2_coef(3)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(taylor_exp2_coef(2)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(taylor_exp2_coef(1)));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

VLM_AVX512 void softmax_avx512(float* s /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
                               float* m_run /*[M]*/, float* l_run /*[M,kSumLanes]*/,
                               float* acc /*[M,Dp]*/) {
  static_assert(KT == 32 && kSumLanes == 16, "two 16-key chunks per tile row, 16 sum lanes");
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int m = 0; m < M; ++m) {
    float* row = s + m * KT;
    const int nv = nvalid[m];
    const __mmask16 k0 = head_mask(nv), k1 = head_mask(nv - 16);
    const __m512 s0 = _mm512_mask_loadu_ps(ninf, k0, row);  // masked keys read as -inf
    const __m512 s1 = _mm512_mask_loadu_ps(ninf, k1, row + 16);
    float m_ref = m_run[m];
    const __m512 limit = _mm512_set1_ps(m_ref + kRescaleThreshold);
    // Usually no valid score exceeds the reference by the threshold: no reduction needed.
    if (nv > 0 && (_mm512_cmp_ps_mask(s0, limit, _CMP_GT_OQ) |
                   _mm512_cmp_ps_mask(s1, limit, _CMP_GT_OQ))) {
      const float mx = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
      const __m512 alpha = m_ref == -INFINITY ? _mm512_setzero_ps()
                                              : exp2_nonpos(_mm512_set1_ps(m_ref - mx));
      m_ref = m_run[m] = mx;
      float* a = acc + m * Dp;
      for (int d = 0; d < Dp; d += 16)
        _mm512_storeu_ps(a + d, _mm512_mul_ps(alpha, _mm512_loadu_ps(a + d)));
      float* l = l_run + m * kSumLanes;
      _mm512_storeu_ps(l, _mm512_mul_ps(alpha, _mm512_loadu_ps(l)));
    }
    // exp2(-inf - m) = 0 for masked keys; a row with no valid key (m_ref may be -inf) gets 0.
    const __m512 mb = _mm512_set1_ps(m_ref);
    const __m512 p0 = _mm512_maskz_mov_ps(k0, exp2_nonpos(_mm512_sub_ps(s0, mb)));
    const __m512 p1 = _mm512_maskz_mov_ps(k1, exp2_nonpos(_mm512_sub_ps(s1, mb)));
    _mm512_storeu_ps(row, p0);
    _mm512_storeu_ps(row + 16, p1);
    float* l = l_run + m * kSumLanes;
    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_loadu_ps(l), _mm512_add_ps(p0, p1)));
  }
}

namespace {

// ---- p . v ---------------------------------------------------------------------------------

template <int R, int C>
VLM_AVX512 void pv_block(const float* p, int nk, int Dp, const float* const* vrows, int d0,
                         float* acc, PrefetchLines* pf) {
  __m512 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_loadu_ps(acc + r * Dp + 16 * c);
  for (int j = 0; j < nk; ++j) {
    if (pf) pf->issue(4);
    __m512 vj[C];
    for (int c = 0; c < C; ++c) vj[c] = _mm512_loadu_ps(vrows[j] + d0 + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(p[r * KT + j]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(pb, vj[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + r * Dp + 16 * c, a[r][c]);
}

template <int R>
VLM_AVX512 void pv_rows(const float* p, int nk, int Dp, const float* const* vrows, float* acc,
                        PrefetchLines* pf) {
  int d = 0;
  for (; d + 64 <= Dp; d += 64) pv_block<R, 4>(p, nk, Dp, vrows, d, acc + d, pf);
  switch ((Dp - d) / 16) {
    case 1: pv_block<R, 1>(p, nk, Dp, vrows, d, acc + d, pf); break;
    case 2: pv_block<R, 2>(p, nk, Dp, vrows, d, acc + d, pf); break;
    case 3: pv_block<R, 3>(p, nk, Dp, vrows, d, acc + d, pf); break;
    default: break;
  }
}

VLM_AVX512 void pv_avx512(const float* p /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp,
                          const float* const* vrows /*[KT]*/, float* acc /*[M,Dp]*/,
                          PrefetchLines* pf) {
  constexpr int RM = 4;  // rows per register block: 4 x 4 chunks = 16 accumulators
  for (int m = 0; m < M; m += RM) {
    const int rows = std::min(RM, M - m);
    // p is 0 beyond each row's nvalid, so the block runs to the largest one.
    const int nk = *std::max_element(nvalid + m, nvalid + m + rows);
    if (nk <= 0) continue;
    const float* pm = p + m * KT;
    float* am = acc + m * Dp;
    switch (rows) {
      case 1: pv_rows<1>(pm, nk, Dp, vrows, am, pf); break;
      case 2: pv_rows<2>(pm, nk, Dp, vrows, am, pf); break;
      case 3: pv_rows<3>(pm, nk, Dp, vrows, am, pf); break;
      default: pv_rows<4>(pm, nk, Dp, vrows, am, pf); break;
    }
  }
}

}  // namespace

const TileOps* tile_ops_avx512() {
  static const TileOps ops{"avx512", nullptr, load_kv_avx512, scores_avx512, softmax_avx512, pv_avx512};
  return cpu_has_avx512() ? &ops : nullptr;
}

}  // namespace vlm::attn
