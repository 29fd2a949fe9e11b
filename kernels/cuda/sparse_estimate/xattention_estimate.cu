// XAttention's estimation on the GPU (see xattention_estimate.cuh).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/sparse_estimate/xattention_estimate.cuh"

namespace vlm::cuda {
namespace {

// ---- scores ----------------------------------------------------------------------------------
// One CTA = 4 warps = 128 reshaped query rows (two 16-row slabs per warp) of one head; it walks
// the causal tiles of 64 reshaped keys, each tile S segments of D (Q and K segment rows through
// shared memory, two cp.async stages), twice: pass 0 the rows' max and sum, pass 1 the
// probabilities, written to shared memory and summed per (query block, key block).
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 128;  // reshaped query rows per CTA
constexpr int kCols = 64;   // reshaped keys per tile

template <int D>
constexpr int stage_elems() {
  return (kRows + kCols) * D;
}
// Two stages; the probability tile [kRows][kCols] f32 reuses the current stage's Q rows when they
// are large enough (D = 128), else has its own region.
template <int D>
constexpr int scores_smem_bytes() {
  return 2 * stage_elems<D>() * 2 + (kRows * D * 2 >= kRows * kCols * 4 ? 0 : kRows * kCols * 4);
}

// Element (row, col) of the probability tile, 8-float groups XOR-swizzled by row.
__device__ __forceinline__ int ps_at(int row, int col) { return row * kCols + (col ^ ((row & 7) << 3)); }

struct ScoreArgs {
  KVView kv;
  const int32_t* table;
  int H, G, t0, q_len, N, S, na, nb, nqb, nkb;
  float scale_log2;  // scale / S * log2(e)
  float* blk;
  XAttnHeads heads;
};

template <int D, class T, class TQ>
__device__ __forceinline__ void load_segment(const TQ* q, const ScoreArgs& a, int h, int hk, int a0, int bt, int s,
                                             T* sq, T* sk, int tid) {
  constexpr int kChunks = D / 8;
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const int row = (a0 + r) * a.S + a.S - 1 - s;  // chunk row
    T* dst = sq + tile::swz<D>(r, c);
    const bool ok = a0 + r < a.na && row < a.q_len;
    const TQ* src = q + (int64_t(a.t0 + (ok ? row : 0)) * a.H + h) * D + c;
    if constexpr (std::is_same_v<TQ, T>) {
      tile::cp_async16(dst, src, ok ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = from_f32<T>(ok ? to_f32(src[e]) : 0.f);
    }
  }
  const T* kbase = static_cast<const T*>(a.kv.k);
  for (int i = tid; i < kCols * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const int key = (bt * kCols + r) * a.S + s;
    const bool ok = key < a.N;
    const int64_t off = ok ? a.kv.token_offset(a.table, hk, key) + c : 0;
    tile::cp_async16(sk + tile::swz<D>(r, c), kbase + off, ok ? 16 : 0);
  }
}

template <int D, class T, class TQ>
__global__ void __launch_bounds__(kThreads) xattn_scores_kernel(const TQ* __restrict__ q, ScoreArgs a) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* const base = reinterpret_cast<T*>(smem_raw);
  auto sq = [&](int st) { return base + st * stage_elems<D>(); };
  auto sk = [&](int st) { return base + st * stage_elems<D>() + kRows * D; };
  constexpr bool kOwnPs = kRows * D * 2 < kRows * kCols * 4;
  auto ps = [&](int st) {
    return kOwnPs ? reinterpret_cast<float*>(base + 2 * stage_elems<D>()) : reinterpret_cast<float*>(sq(st));
  };

  const int tile_idx = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int hi = blockIdx.y, h = a.heads.h[hi], hk = h / a.G;
  const int a0 = tile_idx * kRows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int off = a.N - a.q_len, S = a.S, R = kXAttnBlock / S;
  // The causal reach of the CTA's last valid row (a row is valid when a*S < q_len).
  const int a_last = min(a0 + kRows, (a.q_len + S - 1) / S) - 1;
  if (a_last < a0) return;
  const int b_hi = min(a.nb, (off + a_last * S) / S + 1);
  const int ntiles = (b_hi + kCols - 1) / kCols, nit = ntiles * S;

  // This thread's rows: slab mt, half r -> reshaped row; its causal limit (-1: padded row).
  int lim[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = a0 + warp * 32 + mt * 16 + g + 8 * r;
      lim[mt][r] = row * S < a.q_len ? min(a.nb - 1, (off + row * S) / S) : -1;
    }
  float m[2][2], inv[2][2];
  float l[2][2] = {};
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) m[mt][0] = m[mt][1] = -INFINITY;

  for (int pass = 0; pass < 2; ++pass) {
    load_segment<D>(q, a, h, hk, a0, 0, 0, sq(0), sk(0), tid);
    tile::cp_async_commit();
    float sc[2][kCols / 8][4];
    for (int it = 0; it < nit; ++it) {
      const int st = it & 1, bt = it / S, s = it % S;
      if (it + 1 < nit) load_segment<D>(q, a, h, hk, a0, (it + 1) / S, (it + 1) % S, sq(st ^ 1), sk(st ^ 1), tid);
      tile::cp_async_commit();
      tile::cp_async_wait<1>();
      __syncthreads();
      if (s == 0) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int n = 0; n < kCols / 8; ++n) sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.f;
      }
      tile::qk_tile_smem<D, kCols / 8, 2>(sc, sq(st), warp * 32, sk(st), 0, lane);
      if (s == S - 1) {
        // Scaled, masked scores of the tile (log2 units).
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int n = 0; n < kCols / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int b = bt * kCols + n * 8 + 2 * t4 + (e & 1);
              sc[mt][n][e] = b <= lim[mt][e >> 1] ? sc[mt][n][e] * a.scale_log2 : -INFINITY;
            }
        if (pass == 0) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              float mx = -INFINITY;
#pragma unroll
              for (int n = 0; n < kCols / 8; ++n) mx = fmaxf(mx, fmaxf(sc[mt][n][2 * r], sc[mt][n][2 * r + 1]));
              mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
              mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
              const float m_new = fmaxf(m[mt][r], mx);
              if (m_new == -INFINITY) continue;
              float sum = 0.f;
#pragma unroll
              for (int n = 0; n < kCols / 8; ++n) sum += exp2f(sc[mt][n][2 * r] - m_new) + exp2f(sc[mt][n][2 * r + 1] - m_new);
              l[mt][r] = l[mt][r] * exp2f(m[mt][r] - m_new) + sum;
              m[mt][r] = m_new;
            }
        } else {
          __syncthreads();  // every warp is done with this stage's Q rows (the tile's storage)
          float* p = ps(st);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int row = warp * 32 + mt * 16 + g + 8 * r;
#pragma unroll
              for (int n = 0; n < kCols / 8; ++n) {
                const float x0 = sc[mt][n][2 * r] == -INFINITY ? 0.f : exp2f(sc[mt][n][2 * r] - m[mt][r]) * inv[mt][r];
                const float x1 =
                    sc[mt][n][2 * r + 1] == -INFINITY ? 0.f : exp2f(sc[mt][n][2 * r + 1] - m[mt][r]) * inv[mt][r];
                *reinterpret_cast<float2*>(p + ps_at(row, n * 8 + 2 * t4)) = make_float2(x0, x1);
              }
            }
          __syncthreads();
          // Block sums: (kRows / R) x (kCols / R) blocks of R x R probabilities, rows then columns.
          const int nbr = kRows / R, nbc = kCols / R;
          for (int x = tid; x < nbr * nbc; x += kThreads) {
            const int bi = x / nbc, bj = x % nbc;
            const int I = a0 / R + bi, J = bt * kCols / R + bj;
            if (I >= a.nqb || J >= a.nkb) continue;
            float sum = 0.f;
            for (int rr = 0; rr < R; ++rr)
              for (int cc = 0; cc < R; ++cc) sum += p[ps_at(bi * R + rr, bj * R + cc)];
            a.blk[(int64_t(hi) * a.nqb + I) * a.nkb + J] = sum;
          }
        }
      }
      __syncthreads();
    }
    if (pass == 0) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float sum = tile::quad_sum(l[mt][r]);
          inv[mt][r] = sum > 0.f ? 1.f / sum : 0.f;
        }
    }
  }
}

template <int D, class T, class TQ>
void launch_scores(const void* q, const ScoreArgs& a, int tiles, cudaStream_t stream) {
  constexpr int smem = scores_smem_bytes<D>();
  const bool ok = allow_dynamic_smem(xattn_scores_kernel<D, T, TQ>, smem);
  (void)ok;
  xattn_scores_kernel<D, T, TQ><<<dim3(tiles, a.heads.n), kThreads, smem, stream>>>(static_cast<const TQ*>(q), a);
  VLM_CUDA_CHECK_LAUNCH();
}

// ---- selection ---------------------------------------------------------------------------------
constexpr int kSelThreads = 256;
constexpr double kFix = 4503599627370496.0;  // 2^52: fixed-point units of the mass sums

__device__ __forceinline__ unsigned long long fix(float v) { return v > 0.f ? __double2ull_rz(double(v) * kFix) : 0ull; }

__device__ unsigned long long block_sum(unsigned long long x, unsigned long long* red) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  unsigned long long t = 0;
  for (int w = 0; w < kSelThreads / 32; ++w) t += red[w];
  return t;
}

__global__ void __launch_bounds__(kSelThreads)
xattn_select_kernel(const float* __restrict__ blk, XAttnShape sh, XAttnHeads heads, float threshold, int dense_from,
                    uint32_t* __restrict__ keep, int32_t* __restrict__ nblocks) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int nkb = sh.num_kblocks(), nqb = sh.num_qblocks(), words = sh.words();
  float* row = reinterpret_cast<float*>(smem_raw);       // [nkb]
  uint32_t* kw = reinterpret_cast<uint32_t*>(row + nkb);  // [words]
  __shared__ unsigned long long hsum[256], red[kSelThreads / 32];
  __shared__ int hcnt[256];
  __shared__ unsigned long long s_cum;
  __shared__ uint32_t s_prefix, s_mask;
  __shared__ int s_ties, s_take;

  const int hi = blockIdx.y, h = heads.h[hi], I = blockIdx.x, tid = threadIdx.x;
  const int off = sh.num_keys - sh.q_len;
  const int d0 = (off + I * kXAttnBlock) / kXAttnBlock;
  const int last = off + min(sh.q_len, (I + 1) * kXAttnBlock) - 1, d1 = last / kXAttnBlock;
  const float* src = blk + (int64_t(hi) * nqb + I) * nkb;
  for (int w = tid; w < words; w += kSelThreads) kw[w] = 0u;
  for (int J = tid; J <= d1; J += kSelThreads) row[J] = src[J];
  __syncthreads();
  const bool dense = threshold >= 1.f || last >= dense_from;
  unsigned long long tot = 0, base = 0;
  for (int J = tid; J <= d1; J += kSelThreads) {
    const unsigned long long f = fix(row[J]);
    tot += f;
    if (J == 0 || J >= max(d0, 1)) base += f;
  }
  tot = block_sum(tot, red);
  base = block_sum(base, red);
  const double required = double(threshold) * double(tot);
  // The rest [1, d0): radix select of the last block kept in decreasing order.
  const bool select = !dense && d0 > 1 && double(base) < required;
  if (tid == 0) s_cum = base, s_prefix = 0u, s_mask = 0u, s_ties = 0, s_take = 0;
  __syncthreads();
  for (int shift = 24; select && shift >= 0; shift -= 8) {
    hsum[tid] = 0ull;
    hcnt[tid] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix, mask = s_mask;
    for (int J = 1 + tid; J < d0; J += kSelThreads) {
      const uint32_t u = __float_as_uint(row[J]);
      if ((u & mask) != prefix) continue;
      const int d = (u >> shift) & 255;
      atomicAdd(&hsum[d], fix(row[J]));
      atomicAdd(&hcnt[d], 1);
    }
    __syncthreads();
    if (tid == 0) {
      // The lowest non-empty bucket whose first (largest) element is still kept.
      unsigned long long c = s_cum, chosen_cum = 0;
      int chosen = -1;
      for (int d = 255; d >= 0 && double(c) < required; --d) {
        if (hcnt[d] > 0) chosen = d, chosen_cum = c;
        c += hsum[d];
      }
      chosen = max(chosen, 0);  // (never -1: the highest non-empty bucket starts below `required`)
      s_prefix = prefix | (uint32_t(chosen) << shift);
      s_mask = mask | (255u << shift);
      s_cum = chosen_cum;
      if (shift == 0) {
        // Ties at the boundary value t: tie i (in block order) is kept while cum + i * t < required.
        const unsigned long long ft = fix(__uint_as_float(s_prefix));
        const int n = hcnt[chosen];
        int k = 0;
        while (k < n && (ft == 0 || double(chosen_cum + ft * (unsigned long long)k) < required)) ++k;
        s_ties = n, s_take = k;
      }
    }
    __syncthreads();
  }
  const uint32_t t = s_prefix;
  const int take = s_take, ties = s_ties;
  for (int J = tid; J <= d1; J += kSelThreads) {
    bool k = dense || J == 0 || J >= d0;
    if (!k && select) {
      const uint32_t u = __float_as_uint(row[J]);
      k = u > t || (u == t && take == ties);
    }
    if (k) atomicOr(&kw[J / 32], 1u << (J % 32));
  }
  __syncthreads();
  if (select && tid == 0 && take < ties)  // some ties only: the first `take` in block order
    for (int J = 1, got = 0; J < d0 && got < take; ++J)
      if (__float_as_uint(row[J]) == t) kw[J / 32] |= 1u << (J % 32), ++got;
  __syncthreads();
  uint32_t* dst = keep + (int64_t(h) * nqb + I) * words;
  unsigned long long cnt = 0;
  for (int w = tid; w < words; w += kSelThreads) {
    dst[w] = kw[w];
    cnt += __popc(kw[w]);
  }
  cnt = block_sum(cnt, red);
  if (tid == 0) nblocks[h * nqb + I] = int32_t(cnt);
}

// ---- fill: one warp per (head, query block) --------------------------------------------------
__global__ void xattn_fill_kernel(const uint32_t* __restrict__ keep, const int32_t* __restrict__ block_off, int n,
                                  int nqb, int words, int32_t* __restrict__ blocks, int32_t* __restrict__ ptrs) {
  const int x = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (x >= n) return;
  const uint32_t* kw = keep + int64_t(x) * words;
  int o = block_off[x];
  if (lane == 0) {  // head h's pointers: block_ptr [nqb + 1] then col_ptr [nqb + 1] (no columns)
    const int h = x / nqb, m = x % nqb;
    int32_t* bptr = ptrs + int64_t(h) * 2 * (nqb + 1);
    bptr[m] = o;
    bptr[nqb + 1 + m] = 0;
    if (m == nqb - 1) bptr[2 * nqb + 1] = 0;
  }
  for (int w0 = 0; w0 < words; w0 += 32) {
    const uint32_t word = w0 + lane < words ? kw[w0 + lane] : 0u;
    const int c = __popc(word);
    int incl = c;
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += y;
    }
    int p = o + incl - c;
    for (uint32_t bits = word; bits; bits &= bits - 1) blocks[p++] = ((w0 + lane) * 32 + __ffs(bits) - 1) * kXAttnBlock;
    o += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0 && x % nqb == nqb - 1) ptrs[int64_t(x / nqb) * 2 * (nqb + 1) + nqb] = o;  // the head's end
}

}  // namespace

void xattn_block_scores(const void* q, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                        const XAttnShape& sh, const XAttnHeads& heads, float scale, float* blk, cudaStream_t stream) {
  VLM_CHECK(sh.stride > 0 && kXAttnBlock % sh.stride == 0, "xattention stride {} (a divisor of {})", sh.stride,
            kXAttnBlock);
  VLM_CHECK(heads.n > 0 && heads.n <= kXAttnMaxHeads && sh.q_len > 0 && sh.num_keys >= sh.q_len,
            "xattention scores: {} heads q_len {} keys {}", heads.n, sh.q_len, sh.num_keys);
  VLM_CHECK(kv.num_kv_heads > 0 && sh.num_heads % kv.num_kv_heads == 0, "xattention: {} heads over {} kv heads",
            sh.num_heads, kv.num_kv_heads);
  VLM_CHECK(kv.dtype == DType::BF16 || kv.dtype == DType::F16, "xattention scores read a bf16/f16 cache, not {}",
            dtype_name(kv.dtype));
  const int nqb = sh.num_qblocks(), nkb = sh.num_kblocks();
  VLM_CUDA_CHECK(cudaMemsetAsync(blk, 0, size_t(heads.n) * nqb * nkb * sizeof(float), stream));
  ScoreArgs a;
  a.kv = kv_view(kv);
  VLM_CHECK(a.kv.block_shift >= 0, "xattention: cache block size {} (a power of two)", kv.block_size);
  a.table = block_table;
  a.H = sh.num_heads, a.G = sh.num_heads / kv.num_kv_heads, a.t0 = sh.t0, a.q_len = sh.q_len, a.N = sh.num_keys;
  a.S = sh.stride, a.na = (sh.q_len + sh.stride - 1) / sh.stride, a.nb = (sh.num_keys + sh.stride - 1) / sh.stride;
  a.nqb = nqb, a.nkb = nkb;
  a.scale_log2 = scale / float(sh.stride) * float(M_LOG2E);
  a.blk = blk;
  a.heads = heads;
  const int tiles = (a.na + kRows - 1) / kRows;
  dispatch_tensor_core(kv, act, [&](auto d, auto c, auto t) {
    launch_scores<decltype(d)::value, decltype(c), decltype(t)>(q, a, tiles, stream);
  });
}

void xattn_select(const float* blk, const XAttnShape& sh, const XAttnHeads& heads, float threshold, int dense_from,
                  uint32_t* keep, int32_t* nblocks, cudaStream_t stream) {
  const int nkb = sh.num_kblocks();
  const int smem = nkb * 4 + sh.words() * 4;
  VLM_CHECK(smem <= 200 * 1024, "xattention selection: {} key blocks too many", nkb);
  if (smem > 48 * 1024) (void)allow_dynamic_smem(xattn_select_kernel, 200 * 1024);  // once per kernel and device
  xattn_select_kernel<<<dim3(sh.num_qblocks(), heads.n), kSelThreads, smem, stream>>>(blk, sh, heads, threshold,
                                                                                     dense_from, keep, nblocks);
  VLM_CUDA_CHECK_LAUNCH();
}

void xattn_fill(const uint32_t* keep, const int32_t* block_off, int n, int nqb, int words, int32_t* blocks,
                int32_t* ptrs, cudaStream_t stream) {
  if (n <= 0) return;
  VLM_CHECK(nqb > 0 && n % nqb == 0, "xattention fill: {} items of {} query blocks", n, nqb);
  constexpr int kWarpsPerCta = 8;
  xattn_fill_kernel<<<(n + kWarpsPerCta - 1) / kWarpsPerCta, 32 * kWarpsPerCta, 0, stream>>>(keep, block_off, n, nqb,
                                                                                            words, blocks, ptrs);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
