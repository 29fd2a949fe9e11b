// AVX2+FMA row kernels (see row_kernels.h); same structure as row_kernels_avx512.cpp, with
// tails through maskload/maskstore and 2^n built from exponent bits.
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <cmath>

#include "kernels/ops/row_kernels.h"

#define VLM_AVX2 __attribute__((target("avx2,fma")))

namespace vlm {
namespace {

// 2^n for integral n in [-150, 129], as two normal factors 2^(n/2) * 2^(n - n/2), so that the
// final products overflow to +inf or underflow gradually, like the true result.
VLM_AVX2 inline __m256 mul_pow2(__m256 p, __m256 n) {
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i h1 = _mm256_srai_epi32(ni, 1);
  __m256i h2 = _mm256_sub_epi32(ni, h1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// Same method as exp16 in row_kernels_avx512.cpp (Cody-Waite reduction, degree-7 Taylor).
VLM_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-104.0f), hi = _mm256_set1_ps(89.0f);
  x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));  // NaN stays NaN (second operand)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440054690583e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // A NaN input converts to INT_MIN; the NaN in p carries through the products.
  return mul_pow2(p, n);
}

VLM_AVX2 inline __m256i tail_mask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// See row_kernels_avx512.cpp: stops GCC from fusing a product into an FMA.
VLM_AVX2 inline __m256 rounded(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

VLM_AVX2 inline __m256d widen_lo(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
VLM_AVX2 inline __m256d widen_hi(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

VLM_AVX2 inline double hsum(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

VLM_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

VLM_AVX2 void exp_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, exp8(_mm256_maskload_ps(x + i, m)));
  }
}

VLM_AVX2 double sum_squares_avx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = widen_lo(v), hi = widen_hi(v);
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  if (i < n) {
    __m256 v = _mm256_maskload_ps(x + i, tail_mask(n - i));
    __m256d lo = widen_lo(v), hi = widen_hi(v);
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  return hsum(_mm256_add_pd(a0, a1));
}

VLM_AVX2 void scale_mul_avx2(const float* x, float s, const float* w, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), xs));
  }
  if (i < n) {
    __m256i m = tail_mask(n - i);
    __m256 xs = _mm256_mul_ps(_mm256_maskload_ps(x + i, m), vs);
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_maskload_ps(w + i, m), xs));
  }
}

VLM_AVX2 inline __m256 silu_mul8(__m256 g, __m256 u) {
  __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

VLM_AVX2 void silu_mul_avx2(const float* g, const float* u, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m,
                        silu_mul8(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
  }
}

// Lanes outside m read as -inf: they do not change a max, and exp gives them 0.
VLM_AVX2 inline __m256 load_or_neg_inf(const float* p, __m256i m) {
  return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(p, m),
                          _mm256_castsi256_ps(m));
}

VLM_AVX2 void softmax_avx2(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  int64_t tail = n - n % 8;
  const __m256i m = tail_mask(n - tail);
  __m256 vmax = neg_inf;
  for (int64_t i = 0; i < tail; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  if (tail < n) vmax = _mm256_max_ps(vmax, load_or_neg_inf(x + tail, m));
  const __m256 vm = _mm256_set1_ps(hmax(vmax));

  __m256d sum = _mm256_setzero_pd();
  for (int64_t i = 0; i < tail; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_pd(sum, _mm256_add_pd(widen_lo(e), widen_hi(e)));
  }
  if (tail < n) {
    __m256 e = exp8(_mm256_sub_ps(load_or_neg_inf(x + tail, m), vm));
    _mm256_maskstore_ps(x + tail, m, e);
    sum = _mm256_add_pd(sum, _mm256_add_pd(widen_lo(e), widen_hi(e)));
  }
  const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / hsum(sum)));
  for (int64_t i = 0; i < tail; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (tail < n)
    _mm256_maskstore_ps(x + tail, m, _mm256_mul_ps(_mm256_maskload_ps(x + tail, m), inv));
}

VLM_AVX2 void add_avx2(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m,
                        _mm256_add_ps(_mm256_maskload_ps(y + i, m), _mm256_maskload_ps(x + i, m)));
  }
}

VLM_AVX2 void block_max_avx2(const float* x, int64_t n, int64_t block, float* out) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t e = b0 + block < n ? b0 + block : n;
    __m256 m0 = neg_inf, m1 = neg_inf;
    int64_t i = b0;
    for (; i + 16 <= e; i += 16) {
      m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
      m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
    }
    for (; i + 8 <= e; i += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    if (i < e) m1 = _mm256_max_ps(m1, load_or_neg_inf(x + i, tail_mask(e - i)));
    *out++ = hmax(_mm256_max_ps(m0, m1));
  }
}

VLM_AVX2 inline __m256 exp_term8(__m256 x, __m256 vs, __m256 vm) {
  return exp8(_mm256_sub_ps(rounded(_mm256_mul_ps(x, vs)), vm));
}

VLM_AVX2 double exp_sum_avx2(const float* x, int64_t n, float s, float m, float* y) {
  const __m256 vs = _mm256_set1_ps(s), vm = _mm256_set1_ps(m);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_term8(_mm256_loadu_ps(x + i), vs, vm);
    if (y) _mm256_storeu_ps(y + i, e);
    a0 = _mm256_add_pd(a0, widen_lo(e));
    a1 = _mm256_add_pd(a1, widen_hi(e));
  }
  if (i < n) {  // lanes outside the tail read -inf: exp gives 0
    const __m256i k = tail_mask(n - i);
    const __m256 e = exp_term8(load_or_neg_inf(x + i, k), vs, vm);
    if (y) _mm256_maskstore_ps(y + i, k, e);
    a0 = _mm256_add_pd(a0, widen_lo(e));
    a1 = _mm256_add_pd(a1, widen_hi(e));
  }
  return hsum(_mm256_add_pd(a0, a1));
}

VLM_AVX2 inline void rotate8(float* x1, float* x2, const float* c, const float* s, __m256i m) {
  __m256 a = _mm256_maskload_ps(x1, m), b = _mm256_maskload_ps(x2, m);
  __m256 vc = _mm256_maskload_ps(c, m), vs = _mm256_maskload_ps(s, m);
  __m256 o1 = _mm256_sub_ps(rounded(_mm256_mul_ps(a, vc)), rounded(_mm256_mul_ps(b, vs)));
  __m256 o2 = _mm256_add_ps(rounded(_mm256_mul_ps(b, vc)), rounded(_mm256_mul_ps(a, vs)));
  _mm256_maskstore_ps(x1, m, o1);
  _mm256_maskstore_ps(x2, m, o2);
}

VLM_AVX2 void rotate_half_avx2(float* x, const float* c, const float* s, int64_t h) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t i = 0;
  for (; i + 8 <= h; i += 8) rotate8(x + i, x + h + i, c + i, s + i, all);
  if (i < h) rotate8(x + i, x + h + i, c + i, s + i, tail_mask(h - i));
}

}  // namespace

const RowKernels kRowKernelsAvx2 = {
    "avx2",       exp_avx2, sum_squares_avx2, scale_mul_avx2, silu_mul_avx2,
    softmax_avx2, add_avx2, block_max_avx2, exp_sum_avx2, rotate_half_avx2,
};

}  // namespace vlm

#endif  // x86
