// AVX-512F row kernels (see row_kernels.h). Every function carries the target attribute, so
// the rest of the binary stays baseline x86-64; row_kernels_for() checks cpuid before use.
// Tails use masked loads/stores, so no scalar code runs here.
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <cmath>

#include "kernels/ops/row_kernels.h"

// GCC 12 warns falsely inside avx512fintrin.h (its _mm512_undefined_* placeholders).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define VLM_AVX512 __attribute__((target("avx512f")))

namespace vlm {
namespace {

// exp(x) = 2^n * e^r, n = round(x / ln2), r = x - n ln2 (Cody-Waite: ln2 in a short high part
// that makes n * ln2_hi exact, plus a low correction), e^r by its Taylor series to degree 7
// (|r| <= ln2/2: truncation error < 1e-8 relative), 2^n applied by scalef, which overflows to
// +inf and underflows to 0 by itself. The clamp keeps r finite for +-inf inputs.
VLM_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-104.0f), hi = _mm512_set1_ps(89.0f);
  // max/min return their second operand for NaN: NaN stays NaN.
  x = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440054690583e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

VLM_AVX512 inline __mmask16 tail_mask(int64_t rem) {
  return static_cast<__mmask16>((1u << rem) - 1u);
}

// Keeps a product as its own rounded value: GCC implements _mm512_mul_ps as plain vector
// arithmetic and would otherwise fuse it with a following add into an FMA.
VLM_AVX512 inline __m512 rounded(__m512 v) {
  __asm__("" : "+v"(v));
  return v;
}

VLM_AVX512 inline __m512d sq_acc(__m512 v, __m512d acc_lo, __m512d* acc_hi) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  *acc_hi = _mm512_fmadd_pd(hi, hi, *acc_hi);
  return _mm512_fmadd_pd(lo, lo, acc_lo);
}

VLM_AVX512 inline __m512d sum_acc(__m512 v, __m512d acc) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return _mm512_add_pd(acc, _mm512_add_pd(lo, hi));
}

VLM_AVX512 void exp_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

VLM_AVX512 double sum_squares_avx512(const float* x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) a0 = sq_acc(_mm512_loadu_ps(x + i), a0, &a1);
  if (i < n) a0 = sq_acc(_mm512_maskz_loadu_ps(tail_mask(n - i), x + i), a0, &a1);
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

VLM_AVX512 void scale_mul_avx512(const float* x, float s, const float* w, float* y, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 xs = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(w + i), xs));
  }
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    __m512 xs = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), xs));
  }
}

VLM_AVX512 inline __m512 silu_mul16(__m512 g, __m512 u) {
  __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

VLM_AVX512 void silu_mul_avx512(const float* g, const float* u, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        out + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

VLM_AVX512 void softmax_avx512(float* x, int64_t n) {
  if (n <= 0) return;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 vmax = neg_inf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
  const __mmask16 m = tail_mask(n - i);
  const int64_t tail = i;
  if (tail < n) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, m, x + tail));
  const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));

  __m512d sum = _mm512_setzero_pd();
  for (i = 0; i + 16 <= n; i += 16) {
    __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    sum = sum_acc(e, sum);
  }
  if (tail < n) {
    // Inactive lanes load -inf: exp gives 0 and adds nothing.
    __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, m, x + tail), vm));
    _mm512_mask_storeu_ps(x + tail, m, e);
    sum = sum_acc(e, sum);
  }
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / _mm512_reduce_add_pd(sum)));
  for (i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (tail < n)
    _mm512_mask_storeu_ps(x + tail, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + tail), inv));
}

VLM_AVX512 void add_avx512(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

VLM_AVX512 void block_max_avx512(const float* x, int64_t n, int64_t block, float* out) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t e = b0 + block < n ? b0 + block : n;
    __m512 m0 = neg_inf, m1 = neg_inf;
    int64_t i = b0;
    for (; i + 32 <= e; i += 32) {
      m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
      m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
    }
    for (; i + 16 <= e; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    if (i < e) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(neg_inf, tail_mask(e - i), x + i));
    *out++ = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  }
}

VLM_AVX512 inline __m512 exp_term16(__m512 x, __m512 vs, __m512 vm) {
  return exp16(_mm512_sub_ps(rounded(_mm512_mul_ps(x, vs)), vm));
}

VLM_AVX512 double exp_sum_avx512(const float* x, int64_t n, float s, float m, float* y) {
  const __m512 vs = _mm512_set1_ps(s), vm = _mm512_set1_ps(m);
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // two independent chains
    const __m512 e0 = exp_term16(_mm512_loadu_ps(x + i), vs, vm);
    const __m512 e1 = exp_term16(_mm512_loadu_ps(x + i + 16), vs, vm);
    if (y) {
      _mm512_storeu_ps(y + i, e0);
      _mm512_storeu_ps(y + i + 16, e1);
    }
    a0 = sum_acc(e0, a0);
    a1 = sum_acc(e1, a1);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_term16(_mm512_loadu_ps(x + i), vs, vm);
    if (y) _mm512_storeu_ps(y + i, e);
    a0 = sum_acc(e, a0);
  }
  if (i < n) {  // inactive lanes load -inf: exp gives 0
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp_term16(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, x + i), vs, vm);
    if (y) _mm512_mask_storeu_ps(y + i, k, e);
    a1 = sum_acc(e, a1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

VLM_AVX512 inline void rotate16(float* x1, float* x2, const float* c, const float* s,
                                __mmask16 m) {
  __m512 a = _mm512_maskz_loadu_ps(m, x1), b = _mm512_maskz_loadu_ps(m, x2);
  __m512 vc = _mm512_maskz_loadu_ps(m, c), vs = _mm512_maskz_loadu_ps(m, s);
  __m512 o1 = _mm512_sub_ps(rounded(_mm512_mul_ps(a, vc)), rounded(_mm512_mul_ps(b, vs)));
  __m512 o2 = _mm512_add_ps(rounded(_mm512_mul_ps(b, vc)), rounded(_mm512_mul_ps(a, vs)));
  _mm512_mask_storeu_ps(x1, m, o1);
  _mm512_mask_storeu_ps(x2, m, o2);
}

VLM_AVX512 void rotate_half_avx512(float* x, const float* c, const float* s, int64_t h) {
  int64_t i = 0;
  for (; i + 16 <= h; i += 16) rotate16(x + i, x + h + i, c + i, s + i, 0xFFFF);
  if (i < h) rotate16(x + i, x + h + i, c + i, s + i, tail_mask(h - i));
}

}  // namespace

const RowKernels kRowKernelsAvx512 = {
    "avx512",       exp_avx512, sum_squares_avx512, scale_mul_avx512, silu_mul_avx512,
    softmax_avx512, add_avx512, block_max_avx512, exp_sum_avx512, rotate_half_avx512,
};

}  // namespace vlm

#endif  // x86
