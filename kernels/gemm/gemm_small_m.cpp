// Small-M path of linear(): each weight row is read from memory once for all M rows of x.
// Each pool task owns a range of N; within it, blocks of ~128 KB of W stay in L2 while every
// group of kDefaultRowGroup rows of x passes over them.
//
// AVX-512 kernel: a block of MR rows of x times NR rows of W keeps MR*NR accumulators of 16
// lanes. f16 -> f32 is vcvtph2ps on 16 elements; bf16 is read 32 at a time, the even elements
// by a 16-bit shift of each u32 lane and the odd ones by a mask (no shuffles), against a copy of
// x with the same pair split. The K tail uses masked loads (zeros).

#include "kernels/core/x86_intrinsics.h"

#include <algorithm>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/core/thread_pool.h"

namespace vlm::gemm_detail {

namespace {

// ---- AVX-512 ------------------------------------------------------------------------------

template <DType DT>
VLM_TARGET_AVX512 inline __m512 load_w16(const void* w, int64_t i) {
  if constexpr (DT == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    const auto* p = reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i);
    __m256i h = _mm256_loadu_si256(p);
    if constexpr (DT == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

template <DType DT>
VLM_TARGET_AVX512 inline __m512 load_w16_masked(const void* w, int64_t i, __mmask16 m) {
  if constexpr (DT == DType::F32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  } else {
    __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i);
    if constexpr (DT == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

// y[m, n + r] = x[m, :] · W[n + r, :] (+ bias) for m < MR, r < NR.
template <int MR, int NR, DType DT>
VLM_TARGET_AVX512 void block_avx512(const float* x /*[MR,K]*/, int64_t K, const void* W,
                                    int64_t n, const float* bias, float* y /*[MR,N]*/,
                                    int64_t N) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();

  int64_t k = 0;
  if constexpr (DT == DType::BF16) {
    // 32 bf16 words at a time: as 16 u32 lanes, a shift gives the even elements and a mask the
    // odd ones, no shuffle. x comes in the pair-split layout (split_pairs) to match.
    const __m512i hi_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (; k + 32 <= K; k += 32) {
      __m512i v[NR];
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r)
        v[r] = _mm512_loadu_si512(static_cast<const uint16_t*>(W) + (n + r) * K + k);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {  // even elements, then odd ones
        __m512 w[NR];
#pragma GCC unroll 8
        for (int r = 0; r < NR; ++r)
          w[r] = _mm512_castsi512_ps(half == 0 ? _mm512_slli_epi32(v[r], 16)
                                               : _mm512_and_si512(v[r], hi_half));
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
          __m512 xv = _mm512_loadu_ps(x + m * K + k + 16 * half);
#pragma GCC unroll 8
          for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, w[r], acc[m][r]);
        }
      }
    }
  }
  for (; k + 16 <= K; k += 16) {
    __m512 w[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) w[r] = load_w16<DT>(W, (n + r) * K + k);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      __m512 xv = _mm512_loadu_ps(x + m * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, w[r], acc[m][r]);
    }
  }
  if (k < K) {
    __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1u);
    __m512 w[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) w[r] = load_w16_masked<DT>(W, (n + r) * K + k, mask);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      __m512 xv = _mm512_maskz_loadu_ps(mask, x + m * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_fmadd_ps(xv, w[r], acc[m][r]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r)
      y[m * N + n + r] = _mm512_reduce_add_ps(acc[m][r]) + (bias ? bias[n + r] : 0.0f);
}

// Weight rows per block: MR * NR accumulators plus the weight registers fit in 32 zmm.
template <int MR, DType DT>
constexpr int kRowsPerBlock = MR <= 2 ? 8 : MR <= 4 ? 4 : 3;

template <int MR, DType DT>
VLM_TARGET_AVX512 void rows_avx512(const float* x, int64_t K, const void* W, int64_t n0,
                                   int64_t n1, const float* bias, float* y, int64_t N) {
  constexpr int NR = kRowsPerBlock<MR, DT>;
  int64_t n = n0;
  for (; n + NR <= n1; n += NR) block_avx512<MR, NR, DT>(x, K, W, n, bias, y, N);
  for (; n < n1; ++n) block_avx512<MR, 1, DT>(x, K, W, n, bias, y, N);
}

template <DType DT>
void rows_avx512_m(int64_t mr, const float* x, int64_t K, const void* W, int64_t n0,
                   int64_t n1, const float* bias, float* y, int64_t N) {
  static_assert(kMaxRowGroup == 8);
  switch (mr) {
    case 1: return rows_avx512<1, DT>(x, K, W, n0, n1, bias, y, N);
    case 2: return rows_avx512<2, DT>(x, K, W, n0, n1, bias, y, N);
    case 3: return rows_avx512<3, DT>(x, K, W, n0, n1, bias, y, N);
    case 4: return rows_avx512<4, DT>(x, K, W, n0, n1, bias, y, N);
    case 5: return rows_avx512<5, DT>(x, K, W, n0, n1, bias, y, N);
    case 6: return rows_avx512<6, DT>(x, K, W, n0, n1, bias, y, N);
    case 7: return rows_avx512<7, DT>(x, K, W, n0, n1, bias, y, N);
    case 8: return rows_avx512<8, DT>(x, K, W, n0, n1, bias, y, N);
    default: VLM_CHECK(false, "row group of {}", mr);
  }
}

// ---- portable -----------------------------------------------------------------------------

// Same loop order: a chunk of one weight row is converted to f32 on the stack, then dotted with
// every x row of the group; 8 partial sums per output keep the f32 rounding error small.
void rows_portable(int64_t mr, const float* x, int64_t K, const void* W, DType dt, int64_t n0,
                   int64_t n1, const float* bias, float* y, int64_t N) {
  constexpr int64_t kChunk = 256;
  constexpr int kLanes = 8;
  float wbuf[kChunk];
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  for (int64_t n = n0; n < n1; ++n) {
    float acc[kMaxRowGroup][kLanes] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
      const int64_t len = std::min(kChunk, K - k0);
      const auto* src = static_cast<const char*>(W) + (n * K + k0) * esize;
      for (int64_t i = 0; i < len; ++i) wbuf[i] = load_as_f32(src, dt, i);
      for (int64_t m = 0; m < mr; ++m) {
        const float* xr = x + m * K + k0;
        int64_t i = 0;
        for (; i + kLanes <= len; i += kLanes)
          for (int l = 0; l < kLanes; ++l) acc[m][l] += xr[i + l] * wbuf[i + l];
        for (; i < len; ++i) acc[m][i % kLanes] += xr[i] * wbuf[i];
      }
    }
    for (int64_t m = 0; m < mr; ++m) {
      float s = 0.0f;
      for (int l = 0; l < kLanes; ++l) s += acc[m][l];
      y[m * N + n] = s + (bias ? bias[n] : 0.0f);
    }
  }
}

// Copy of x[M,K] in the layout block_avx512<.., BF16> reads: within each full block of 32,
// the 16 even-indexed elements, then the 16 odd-indexed ones; the last K % 32 unchanged.
void split_pairs(const float* x, int64_t M, int64_t K, float* out) {
  const int64_t k32 = K / 32 * 32;
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x + m * K;
    float* dst = out + m * K;
    for (int64_t k = 0; k < k32; k += 32)
      for (int i = 0; i < 16; ++i) {
        dst[k + i] = src[k + 2 * i];
        dst[k + 16 + i] = src[k + 2 * i + 1];
      }
    std::copy(src + k32, src + K, dst + k32);
  }
}

// x is in the split layout when avx && W is BF16.
void rows(bool avx, int64_t mr, const float* x, int64_t K, const TensorView& W, int64_t n0,
          int64_t n1, const float* bias, float* y, int64_t N) {
  if (avx) {
    switch (W.dtype) {
      case DType::F32: return rows_avx512_m<DType::F32>(mr, x, K, W.data, n0, n1, bias, y, N);
      case DType::BF16: return rows_avx512_m<DType::BF16>(mr, x, K, W.data, n0, n1, bias, y, N);
      case DType::F16: return rows_avx512_m<DType::F16>(mr, x, K, W.data, n0, n1, bias, y, N);
      default: break;
    }
  }
  rows_portable(mr, x, K, W.data, W.dtype, n0, n1, bias, y, N);
}

}  // namespace

void linear_small_m_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets,
                          int64_t row_group) {
  if (targets.empty()) return;
  const int64_t K = targets[0].W->dim(1);
  const DType dt = targets[0].W->dtype;
  const int64_t group = row_group > 0 ? std::min(row_group, kMaxRowGroup) : kDefaultRowGroup;
  std::vector<RowSplit> splits;
  for (const LinearTarget& t : targets) {
    VLM_CHECK(t.W->dim(1) == K && t.W->dtype == dt, "linear_small_m_multi: W {} {} vs K {} {}", t.W->shape.str(),
              dtype_name(t.W->dtype), K, dtype_name(dt));
    // Tasks of at least ~32K weights, at most 8 per thread.
    splits.push_back(plan_row_split(t.W->dim(0), K, static_cast<int64_t>(dtype_size(dt)), 32768, 8,
                                    global_thread_pool().num_threads()));
  }

  const bool avx = use_avx512();
  if (avx && dt == DType::BF16) {
    thread_local std::vector<float> split;
    split.resize(static_cast<size_t>(M * K));
    split_pairs(x, M, K, split.data());
    x = split.data();
  }

  run_row_blocks(targets, splits.data(), [&](size_t i, int64_t n0, int64_t n1) {
    const int64_t N = targets[i].W->dim(0);
    for (int64_t m0 = 0; m0 < M; m0 += group)
      rows(avx, std::min(group, M - m0), x + m0 * K, K, *targets[i].W, n0, n1, targets[i].bias, targets[i].y + m0 * N, N);
  });
}

void linear_small_m(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                    const float* bias /*[N] or null*/, float* y /*[M,N]*/, int64_t row_group) {
  const LinearTarget t{&W, bias, y};
  linear_small_m_multi(x, M, std::span<const LinearTarget>(&t, 1), row_group);
}

}  // namespace vlm::gemm_detail
