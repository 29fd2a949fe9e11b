// bf16 GEMV path of linear() for BF16 W and few rows of x (decode; kernels/gemm/gemm_internal.h):
// x is rounded to bf16 once per call into a zero-padded copy, and each output is the dot product
// of one x row with one W row in its stored [N, K] layout, 32 products per vdpbf16ps (a W row
// and an x row load side by side: no repacking of W, no pair split of x). MR rows of x times NR
// rows of W keep MR*NR f32 accumulators of 16 lanes, reduced once per output at the end.
//
// Decode rows are short (K = 896: 1792 bytes, 28 lines). One row of x (one sequence) reads W
// row after row, in ascending addresses, which the hardware prefetcher follows; with more rows of
// x, NR W rows are read side by side and the first row group of a block prefetches the next NR
// rows (contiguous in W) while it reads the current ones.
// Parallel over N: pool tasks of contiguous W rows; inside a task, blocks of ~128 KB of W stay in
// L2 while every row group of x passes over them, so W is read from memory once for any M.

#include "kernels/core/x86_intrinsics.h"

#include <algorithm>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"
#include "kernels/core/dtype.h"
#include "kernels/core/thread_pool.h"
#include "kernels/gemm/gemm_internal.h"

namespace vlm::gemm_detail {

namespace {

#define VLM_TARGET_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,f16c,fma")))

// The 16-lane sums of v[0..7]: lane j of the result is the sum of v[j]'s lanes.
VLM_TARGET_BF16 inline __m256 reduce8(const __m512* v) {
  __m512 s[4], t[2];
  // Per 128-bit lane: v[2i] in elements 0 and 2, v[2i+1] in 1 and 3.
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  // Per 128-bit lane: element e of t[j] is that lane's partial sum of v[4j + e].
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {
    const __m512d a = _mm512_castps_pd(s[2 * j]), b = _mm512_castps_pd(s[2 * j + 1]);
    t[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  // Sum the four 128-bit lanes: t0 and t1 lanes (0, 1) + (2, 3), then lane pairs.
  const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], 0x44), _mm512_shuffle_f32x4(t[0], t[1], 0xee));
  const __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(u, u, 0x08), _mm512_shuffle_f32x4(u, u, 0x0d));
  return _mm512_castps512_ps256(w);
}

// y[m, n + r] = bf16(x[m, :]) · W[n + r, :] (+ bias) for m < MR, r < NR. xb holds MR rows of
// Kp = K rounded up to 32 bf16 (zeros past K). PF: prefetch the next NR rows of W into L2.
template <int MR, int NR, bool PF>
VLM_TARGET_BF16 void gemv_block(const uint16_t* xb /*[MR,Kp]*/, int64_t Kp, const uint16_t* W /*[N,K]*/,
                                int64_t K, int64_t n, const float* bias, float* y /*[MR,N]*/, int64_t N) {
  __m512 acc[MR][NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();
  const uint16_t* w0 = W + n * K;
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh w[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      // Into L2, not L1: the block stays there for the later row groups, and L1 keeps the x rows
      // (T0 here measured 1.2-1.6x slower at 4-16 rows: bench_gemm_qwen decode/*/gemv_bf16/16).
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(w0 + (NR + r) * K + k), _MM_HINT_T1);
      w[r] = (__m512bh)_mm512_loadu_si512(w0 + r * K + k);
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + m * Kp + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], xv, w[r]);
    }
  }
  if (k < K) {  // the tail: zeros in W past K (x is zero there too)
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1u);
    __m512bh w[NR];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) w[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w0 + r * K + k);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + m * Kp + k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], xv, w[r]);
    }
  }
  // Eight accumulators at a time into one vector of their eight sums (acc[m][r] is output
  // m * NR + r, in that order; a last group of fewer than eight is padded with zeros).
#pragma GCC unroll 4
  for (int i = 0; i < MR * NR; i += 8) {
    __m512 v[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) v[j] = i + j < MR * NR ? (&acc[0][0])[i + j] : _mm512_setzero_ps();
    const __m256 s = reduce8(v);
    alignas(32) float out[8];
    _mm256_store_ps(out, s);
#pragma GCC unroll 8
    for (int j = 0; j < 8 && i + j < MR * NR; ++j) {
      const int m = (i + j) / NR, r = (i + j) % NR;
      y[m * N + n + r] = out[j] + (bias ? bias[n + r] : 0.0f);
    }
  }
}

// One x row times NR W rows, row after row: the addresses ascend through the block, which the
// hardware prefetcher follows best (measured: ~1.5x the rate of reading the NR rows side by side,
// with or without software prefetch, on the LM head's 151936 x 896). Two accumulators per row.
template <int NR>
VLM_TARGET_BF16 void gemv_block_seq(const uint16_t* xb, const uint16_t* W, int64_t K, int64_t n,
                                    const float* bias, float* y) {
  __m512 acc[NR];
  const uint16_t* w0 = W + n * K;
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
    const uint16_t* wr = w0 + r * K;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) {
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(xb + k), (__m512bh)_mm512_loadu_si512(wr + k));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(xb + k + 32), (__m512bh)_mm512_loadu_si512(wr + k + 32));
    }
    for (; k < K; k += 32) {
      const __mmask32 mask = K - k >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1u);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(xb + k), (__m512bh)_mm512_maskz_loadu_epi16(mask, wr + k));
    }
    acc[r] = _mm512_add_ps(a0, a1);
  }
  const __m256 s = reduce8(acc);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) y[n + r] = out[r] + (bias ? bias[n + r] : 0.0f);
}

// Rows [n0, n1) of W for MR rows of x: blocks of NR rows, then single rows. One row of x reads
// the block row after row (gemv_block_seq); more rows interleave NR rows (gemv_block).
template <int MR, bool PF>
VLM_TARGET_BF16 void gemv_rows(const uint16_t* xb, int64_t Kp, const uint16_t* W, int64_t K, int64_t n0,
                               int64_t n1, const float* bias, float* y, int64_t N) {
  // Accumulators plus the NR weight registers and one x register fit in 32 zmm. Eight rows of x
  // against three W rows: 24 products per 11 loads.
  constexpr int NR = MR <= 2 ? 8 : MR <= 4 ? 4 : 3;
  int64_t n = n0;
  if constexpr (MR == 1)
    for (; n + NR <= n1; n += NR) gemv_block_seq<NR>(xb, W, K, n, bias, y);
  else
    for (; n + NR <= n1; n += NR) gemv_block<MR, NR, PF>(xb, Kp, W, K, n, bias, y, N);
  for (; n < n1; ++n) gemv_block<MR, 1, false>(xb, Kp, W, K, n, bias, y, N);
}

// Rows of x per pass over a block of W: the first pass streams W from memory (with prefetch)
// while it computes, later passes read the block from L2, so more rows in a pass hide more of
// them behind the memory stream. Eight rows while their bf16 copies fit in L1 (K <= 2048), else
// four. bench_gemm_qwen decode/*/gemv_bf16/16, min of 6 alternated runs at load ~2-3 (noisy):
// 4864x896 0.728 -> 0.631 ms, 151936x896 19.8 -> 19.3 ms, 896x4864 (still 4 rows) 0.617 / 0.636.
constexpr int64_t kGroup = 8;
int64_t row_group(int64_t Kp) { return Kp <= 2048 ? kGroup : 4; }

void gemv_rows_m(int64_t mr, bool prefetch, const uint16_t* xb, int64_t Kp, const uint16_t* W, int64_t K,
                 int64_t n0, int64_t n1, const float* bias, float* y, int64_t N) {
  static_assert(kGroup == 8);
  switch (mr * 2 + (prefetch ? 1 : 0)) {
    case 2:
    case 3: return gemv_rows<1, false>(xb, Kp, W, K, n0, n1, bias, y, N);
#define VLM_CASE(m)                                                    \
  case 2 * m: return gemv_rows<m, false>(xb, Kp, W, K, n0, n1, bias, y, N); \
  case 2 * m + 1: return gemv_rows<m, true>(xb, Kp, W, K, n0, n1, bias, y, N);
    VLM_CASE(2) VLM_CASE(3) VLM_CASE(4) VLM_CASE(5) VLM_CASE(6) VLM_CASE(7) VLM_CASE(8)
#undef VLM_CASE
    default: VLM_CHECK(false, "row group of {}", mr);
  }
}

// x [M,K] f32 -> out [M,Kp] bf16, round to nearest even, zeros past K.
VLM_TARGET_BF16 void round_rows_bf16(const float* x, int64_t M, int64_t K, int64_t Kp, uint16_t* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x + m * K;
    uint16_t* dst = out + m * Kp;
    for (int64_t k = 0; k < Kp; k += 32) {
      const int64_t left = K - k;
      const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1u);
      const __mmask16 m1 = left >= 32   ? __mmask16(0xffff)
                           : left <= 16 ? __mmask16(0)
                                        : __mmask16((1u << (left - 16)) - 1u);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, src + k);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, src + k + 16);
      _mm512_storeu_si512(dst + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

}  // namespace

void linear_gemv_bf16_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets) {
  if (targets.empty() || M == 0) return;
  const int64_t K = bf16_targets_k(targets, "linear_gemv_bf16");
  if (K == 0) return;  // linear() handles K = 0
  const int64_t Kp = (K + 31) / 32 * 32;
  thread_local std::vector<uint16_t> xb_buf;
  xb_buf.resize(static_cast<size_t>(M * Kp));
  round_rows_bf16(x, M, K, Kp, xb_buf.data());
  const uint16_t* xb = xb_buf.data();
  const int64_t group = row_group(Kp);

  // Tasks of at least ~128K weights (256 KB), at most 2 per thread before the guided split
  // shrinks the last ones (plan_row_tasks). Each task starts a new stream; in-process A/B of
  // alternate decode steps (short context, fast memory mode): 2 per thread and 128K weights
  // 1.1-1.4 % faster per step than 4 and 64K (o: 395 -> 374 us, q/k/v: 508 -> 493 us per step),
  // 8 per thread 3.3 % slower.
  constexpr size_t kInline = 4;
  RowSplit split_inline[kInline];
  std::vector<RowSplit> split_heap;
  RowSplit* splits = split_inline;
  if (targets.size() > kInline) {
    split_heap.resize(targets.size());
    splits = split_heap.data();
  }
  for (size_t i = 0; i < targets.size(); ++i)
    splits[i] = plan_row_split(targets[i].W->dim(0), K, 2, 131072, 2, global_thread_pool().num_threads());
  run_row_blocks(targets, splits, [&](size_t i, int64_t n0, int64_t n1) {
    const LinearTarget& t = targets[i];
    const int64_t N = t.W->dim(0);
    const auto* w = static_cast<const uint16_t*>(t.W->data);
    for (int64_t m0 = 0; m0 < M; m0 += group)  // the first group streams W from memory
      gemv_rows_m(std::min(group, M - m0), m0 == 0, xb + m0 * Kp, Kp, w, K, n0, n1, t.bias, t.y + m0 * N, N);
  });
}

void linear_gemv_bf16(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                      const float* bias /*[N] or null*/, float* y /*[M,N]*/) {
  const LinearTarget t{&W, bias, y};
  linear_gemv_bf16_multi(x, M, std::span<const LinearTarget>(&t, 1));
}

}  // namespace vlm::gemm_detail
