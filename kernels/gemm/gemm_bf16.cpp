// bf16 dot-product path of linear() for BF16 W (kernels/gemm/gemm_internal.h): x is rounded to bf16
// once per call, products are accumulated in f32 by AVX512-BF16 vdpbf16ps.
//
// Layout (each u32 holds a pair of bf16 along K, the element k = 2p in the low half):
//  - A (x): packed once per call into panels of kMR rows, [panel][p][kMR] u32, zero-padded in M
//    and K, shared by all tasks;
//  - B (W): each task owns a block of columns of W (at most kMaxNc); per chunk of K it packs them into
//    [micro-panel of kNR columns][p][kNR] u32 (a 16x16 u32 transpose of W's rows) in a
//    thread-local buffer that stays in L2 while every A panel passes over it.
// Micro-kernel: kMR x kNR outputs (8 x 48) in 3*kMR zmm accumulators; per pair p three loads of B, kMR
// broadcasts of A, 3*kMR vdpbf16ps (8 x 48 beat 12 x 32 and 6 x 64 here). Chunks of K after
// the first accumulate into y.

#include "kernels/core/x86_intrinsics.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/core/thread_pool.h"

namespace vlm::gemm_detail {

namespace {

constexpr int kMR = 8;             // rows of x per micro-kernel
constexpr int kNV = 3;             // zmm per output row
constexpr int kNR = 16 * kNV;      // columns of W per micro-panel
constexpr int64_t kMaxNc = 256 / kNR * kNR;    // columns of W per task
constexpr int64_t kBBudget = 448 * 1024;  // bytes of packed B per task and K chunk (L2)

#define VLM_TARGET_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,f16c,fma")))

// One bf16 pair (W[n, 2p], W[n, 2p+1]) as a u32; 0 beyond the row's end.
inline uint32_t w_pair(const uint16_t* w_row, int64_t K, int64_t p) {
  const int64_t k = 2 * p;
  const uint32_t lo = k < K ? w_row[k] : 0u;
  const uint32_t hi = k + 1 < K ? w_row[k + 1] : 0u;
  return lo | (hi << 16);
}

// Transposes 16 rows of 16 u32 (r[i] = row i) into 16 columns (out[c] = column c).
VLM_TARGET_BF16 inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: column 4L + j of rows 4i..4i+3.
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
    const __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    r[0 + j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    r[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

// Packs W[n0 : n0+nc, pairs p0 : p0+pc] into out [ceil(nc/kNR)][pc][kNR] u32 (zeros past N, K).
VLM_TARGET_BF16 void pack_b(const uint16_t* W /*[N,K]*/, int64_t N, int64_t K, int64_t n0,
                            int64_t nc, int64_t p0, int64_t pc, uint32_t* out) {
  const int64_t full_pairs = K / 2;  // pairs with both elements inside the row
  for (int64_t j = 0; j * kNR < nc; ++j) {
    uint32_t* panel = out + j * pc * kNR;
    for (int h = 0; h < kNV; ++h) {
      const int64_t nb = n0 + j * kNR + 16 * h;  // first W row of this half
      const bool rows_full = nb + 16 <= std::min(N, n0 + nc);
      int64_t p = 0;
      if (rows_full) {
        for (; p + 16 <= pc && p0 + p + 16 <= full_pairs; p += 16) {
          __m512i r[16];
          for (int i = 0; i < 16; ++i)
            r[i] = _mm512_loadu_si512(W + (nb + i) * K + 2 * (p0 + p));
          transpose16(r);
          for (int c = 0; c < 16; ++c)
            _mm512_storeu_si512(panel + (p + c) * kNR + 16 * h, r[c]);
        }
      }
      for (; p < pc; ++p)
        for (int i = 0; i < 16; ++i) {
          const int64_t n = nb + i;
          panel[p * kNR + 16 * h + i] =
              (n < N && n < n0 + nc) ? w_pair(W + n * K, K, p0 + p) : 0u;
        }
    }
  }
}

// Packs x [M,K] (f32) into out [ceil(M/kMR)][P][kMR] u32 of bf16 pairs, P = ceil(K/2), rounded
// to nearest even (vcvtne2ps2bf16, the same as f32_to_bf16); rows past M are zero. Per 32
// elements of K: one bf16 vector per row (16 pairs), transposed to 16 pairs x kMR rows.
VLM_TARGET_BF16 void pack_a_panel(const float* x, int64_t M, int64_t K, int64_t panel,
                                  uint32_t* out /*[P][kMR]*/) {
  static_assert(kMR <= 16);
  const int rows = static_cast<int>(std::min<int64_t>(kMR, M - panel * kMR));
  const float* x0 = x + panel * kMR * K;
  for (int64_t k = 0; k < K; k += 32) {
    const int64_t left = K - k;
    const __mmask16 m0 = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
    const __mmask16 m1 = left >= 32   ? __mmask16(0xffff)
                         : left <= 16 ? __mmask16(0)
                                      : __mmask16((1u << (left - 16)) - 1u);
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      if (i >= rows) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      const __m512 lo = _mm512_maskz_loadu_ps(m0, x0 + i * K + k);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, x0 + i * K + k + 16);
      // Element e is bf16(lo[e]) for e < 16, bf16(hi[e - 16]) above: u32 lane l holds
      // elements 2l and 2l+1 of this block, the pair p = k/2 + l.
      r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    }
    transpose16(r);  // r[l] = pair k/2 + l of rows 0..15
    const int64_t pairs = std::min<int64_t>(16, (left + 1) / 2);
    constexpr __mmask16 kRowMask = static_cast<__mmask16>((1u << kMR) - 1u);
    for (int64_t l = 0; l < pairs; ++l)
      _mm512_mask_storeu_epi32(out + (k / 2 + l) * kMR, kRowMask, r[l]);
  }
}

// y[0:rows, 0:cols] (+)= A panel · B micro-panel over pc pairs (+ bias[0:cols] when given).
VLM_TARGET_BF16 void micro_kernel(const uint32_t* a /*[pc][kMR]*/, const uint32_t* b /*[pc][kNR]*/,
                                  int64_t pc, float* y, int64_t ldy, int rows, int cols,
                                  bool accumulate, const float* bias,
                                  const uint32_t* a_next /*[pc][kMR] or null*/,
                                  const float* y_next /*the next tile of y, or null*/) {
  __m512 acc[kMR][kNV];
  __mmask16 cmask[kNV];
  for (int v = 0; v < kNV; ++v) {
    const int c = std::clamp(cols - 16 * v, 0, 16);
    cmask[v] = c == 16 ? __mmask16(0xffff) : __mmask16((1u << c) - 1u);
  }
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v)
      acc[i][v] = (accumulate && i < rows)
                      ? _mm512_maskz_loadu_ps(cmask[v], y + i * ldy + 16 * v)
                      : _mm512_setzero_ps();
  for (int64_t p = 0; p < pc; ++p) {
    // The next A panel into L2 (one line per 64 bytes of it).
    if (a_next && (p & 3) == 0) _mm_prefetch(reinterpret_cast<const char*>(a_next + p * kMR), _MM_HINT_T1);
    // The next tile of y (kMR rows of kNV lines) into L1, one line per pair at the start.
    if (y_next && p < kMR * kNV)
      _mm_prefetch(reinterpret_cast<const char*>(y_next + (p / kNV) * ldy + (p % kNV) * 16), _MM_HINT_T0);
    __m512bh bv[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512(b + p * kNR + 16 * v);
#pragma GCC unroll 12
    for (int i = 0; i < kMR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * kMR + i]));
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
    }
  }
  __m512 bvec[kNV];
  for (int v = 0; v < kNV; ++v)
    bvec[v] = bias ? _mm512_maskz_loadu_ps(cmask[v], bias + 16 * v) : _mm512_setzero_ps();
  for (int i = 0; i < rows; ++i)
    for (int v = 0; v < kNV; ++v)
      _mm512_mask_storeu_ps(y + i * ldy + 16 * v, cmask[v], _mm512_add_ps(acc[i][v], bvec[v]));
}

struct U32Deleter {
  void operator()(uint32_t* p) const { std::free(p); }
};

// A 64-byte-aligned u32 buffer of at least n elements, kept per thread.
uint32_t* scratch_u32(std::unique_ptr<uint32_t, U32Deleter>& buf, int64_t& cap, int64_t n) {
  if (n > cap) {
    const size_t bytes = (static_cast<size_t>(n) * 4 + 63) / 64 * 64;
    buf.reset(static_cast<uint32_t*>(std::aligned_alloc(64, bytes)));
    cap = 0;
    VLM_CHECK(buf, "out of memory for GEMM scratch ({} bytes)", bytes);
    cap = n;
  }
  return buf.get();
}

}  // namespace

bool bf16_dot_supported() { return use_avx512() && cpu_has_avx512_bf16(); }

int64_t bf16_targets_k(std::span<const LinearTarget> targets, const char* kernel) {
  VLM_CHECK(bf16_dot_supported(), "{}: no AVX512-BF16 on this CPU (or switched off)", kernel);
  const int64_t K = targets[0].W->dim(1);
  for (const LinearTarget& t : targets)
    VLM_CHECK(t.W->dtype == DType::BF16 && t.W->dim(1) == K, "{}: W {} {} (want BF16, K {})", kernel,
              t.W->shape.str(), dtype_name(t.W->dtype), K);
  return K;
}

namespace {

// How linear_bf16_dot splits one W: column blocks of nc (one per task), K in chunks of pc_even pairs.
struct DotPlan {
  int64_t nc = 0;
  int64_t num_tasks = 0;
  int64_t pc_even = 0;
};

DotPlan plan_dot(int64_t N, int64_t P, int num_threads, int64_t chunk_pairs) {
  DotPlan d;
  // Tasks: column blocks of W, at least two per thread when N allows (dynamic balance).
  const int64_t per_task = (N + 2 * num_threads - 1) / (2 * num_threads);
  d.nc = std::clamp<int64_t>((per_task + kNR - 1) / kNR * kNR, kNR, kMaxNc);
  d.num_tasks = (N + d.nc - 1) / d.nc;
  const int64_t pc_max = chunk_pairs > 0 ? (chunk_pairs + 15) / 16 * 16
                                         : std::max<int64_t>(16, kBBudget / (d.nc * 4) / 16 * 16);
  const int64_t num_chunks = (P + pc_max - 1) / pc_max;
  d.pc_even = ((P + num_chunks - 1) / num_chunks + 15) / 16 * 16;
  return d;
}

// Column block t of one W: packs it chunk by chunk and runs every A panel over it.
VLM_TARGET_BF16 void dot_task(const uint32_t* a /*[panels][P][kMR]*/, int64_t M, int64_t P, const uint16_t* w,
                              int64_t N, int64_t K, const DotPlan& d, int64_t t, const float* bias, float* y) {
  thread_local std::unique_ptr<uint32_t, U32Deleter> b_buf;
  thread_local int64_t b_cap = 0;
  const int64_t num_panels = (M + kMR - 1) / kMR;
  const int64_t nc = d.nc, pc_even = d.pc_even;
  const int64_t n0 = t * nc, ncols = std::min(nc, N - n0);
  const int64_t num_micro = (ncols + kNR - 1) / kNR;
  uint32_t* b = scratch_u32(b_buf, b_cap, num_micro * pc_even * kNR);
  for (int64_t p0 = 0; p0 < P; p0 += pc_even) {
    const int64_t pc = std::min(pc_even, P - p0);
    pack_b(w, N, K, n0, ncols, p0, pc, b);
    const bool last = p0 + pc == P;
    for (int64_t panel = 0; panel < num_panels; ++panel) {
      const uint32_t* ap = a + panel * P * kMR + p0 * kMR;
      const int rows = static_cast<int>(std::min<int64_t>(kMR, M - panel * kMR));
      for (int64_t j = 0; j < num_micro; ++j) {
        const int cols = static_cast<int>(std::min<int64_t>(kNR, ncols - j * kNR));
        const int64_t col = n0 + j * kNR;
        // Only full tiles are prefetched (a partial one may end at the end of y).
        const float* y_next = nullptr;
        if (j + 1 < num_micro && (j + 2) * kNR <= ncols && rows == kMR)
          y_next = y + panel * kMR * N + col + kNR;
        else if (j + 1 == num_micro && (panel + 2) * kMR <= M && kNR <= ncols)
          y_next = y + (panel + 1) * kMR * N + n0;
        micro_kernel(ap, b + j * pc * kNR, pc, y + panel * kMR * N + col, N, rows, cols,
                     p0 > 0, last && bias ? bias + col : nullptr,
                     j == 0 && panel + 1 < num_panels ? ap + P * kMR : nullptr, y_next);
      }
    }
  }
}

}  // namespace

void linear_bf16_dot_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets,
                           int64_t chunk_pairs) {
  if (targets.empty() || M == 0) return;
  const int64_t K = bf16_targets_k(targets, "linear_bf16_dot");
  if (K == 0) return;                       // linear() handles K = 0
  const int64_t P = (K + 1) / 2;            // bf16 pairs per row
  const int64_t num_panels = (M + kMR - 1) / kMR;
  ThreadPool& pool = global_thread_pool();

  // A, once per call (shared by the tasks below; kept by the calling thread).
  thread_local std::unique_ptr<uint32_t, U32Deleter> a_buf;
  thread_local int64_t a_cap = 0;
  uint32_t* a = scratch_u32(a_buf, a_cap, num_panels * P * kMR);
  pool.parallel_for(num_panels, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pack_a_panel(x, M, K, i, a + i * P * kMR);
  });

  std::vector<DotPlan> plans;
  std::vector<int64_t> first_task;  // prefix sums of the targets' task counts
  int64_t total = 0;
  for (const LinearTarget& t : targets) {
    plans.push_back(plan_dot(t.W->dim(0), P, pool.num_threads(), chunk_pairs));
    first_task.push_back(total);
    total += plans.back().num_tasks;
  }
  pool.run_tasks(total, [&](int64_t task) {
    const size_t i = static_cast<size_t>(std::upper_bound(first_task.begin(), first_task.end(), task) -
                                         first_task.begin()) - 1;
    const LinearTarget& t = targets[i];
    if (t.W->dim(0) == 0) return;
    dot_task(a, M, P, static_cast<const uint16_t*>(t.W->data), t.W->dim(0), K, plans[i], task - first_task[i],
             t.bias, t.y);
  });
}

void linear_bf16_dot(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                     const float* bias /*[N] or null*/, float* y /*[M,N]*/,
                     int64_t chunk_pairs) {
  const LinearTarget t{&W, bias, y};
  linear_bf16_dot_multi(x, M, std::span<const LinearTarget>(&t, 1), chunk_pairs);
}

void linear_bf16_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                     const float* bias /*[N] or null*/, float* y /*[M,N]*/) {
  VLM_CHECK(W.dtype == DType::BF16, "linear_bf16_ref: W dtype {}", dtype_name(W.dtype));
  const int64_t N = W.dim(0), K = W.dim(1);
  const auto* w = static_cast<const uint16_t*>(W.data);
  std::vector<double> xr(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xr[k] = bf16_to_f32(f32_to_bf16(x[m * K + k]));
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += xr[k] * static_cast<double>(bf16_to_f32(w[n * K + k]));
      y[m * N + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace vlm::gemm_detail
