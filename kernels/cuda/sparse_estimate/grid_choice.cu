// The grid search's stride and layout choice on the device (grid_estimate.cuh: grid_choose_strides,
// grid_layouts_from_phase): choose_grid_stride and grid_layout_from_phase_mass of
// kernels/sparse_prefill/grid.h for every head at once, with the host's decisions: every sum
// that decides is added in the host's order (a warp loads 32 terms at a time and every lane adds
// them in sequence), the top columns are the host partial_sort's (value descending, index
// ascending: a radix select of the kGridChoiceTop-th largest, then a bitonic sort of those), the
// maxima and the stride rule are order-free reductions. Four launches; each CTA's serial chains
// are short (the first version: one thread per sum, a segmented radix sort of every column).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"

namespace vlm::cuda {
namespace {

constexpr int kTop = kGridChoiceTop;
constexpr int kSelThreads = 1024;
constexpr unsigned kAll = 0xffffffffu;

// x[first + k * step] for k < count added to 0.0 in order of k, on every lane of the warp.
__device__ double warp_ordered_sum(const double* x, int64_t first, int step, int count) {
  const int lane = threadIdx.x % 32;
  double t = 0;
  double v = lane < count ? x[first + int64_t(lane) * step] : 0.0;
  for (int b = 0; b < count; b += 32) {
    const int nb = b + 32 + lane;
    const double next = nb < count ? x[first + int64_t(nb) * step] : 0.0;  // the next batch, loaded early
    const int cnt = min(32, count - b);
    for (int k = 0; k < cnt; ++k) t += __shfl_sync(kAll, v, k);
    v = next;
  }
  return t;
}

// The radix sort's order of doubles as unsigned (CUB's twiddle: -0.0 below +0.0).
__device__ __forceinline__ unsigned long long order_bits(double d) {
  const unsigned long long u = static_cast<unsigned long long>(__double_as_longlong(d));
  return (u >> 63) ? ~u : u | (1ull << 63);
}

// Grid (H, 2), kSelThreads threads. y = 1: warp 0 the slash total (offsets 1..N-1), warp 1 the
// column total (n_init..N-1), in order. y = 0: head h's top m = min(N - n_init, kTop) columns
// j >= n_init by (col descending, j ascending) into top_keys / top_idx [h][0, m).
__global__ void __launch_bounds__(kSelThreads)
top_columns_kernel(const double* col, const double* slash, GridChoiceShape sh, double* totals, double* top_keys,
                   int32_t* top_idx) {
  const int h = blockIdx.x, N = sh.num_keys, n0 = sh.n_init, warp = threadIdx.x / 32;
  const double* c = col + int64_t(h) * N;
  if (blockIdx.y == 1) {
    if (warp == 0) {
      const int o0 = min(1, N);
      const double t = warp_ordered_sum(slash + int64_t(h) * N, o0, 1, N - o0);
      if (threadIdx.x == 0) totals[2 * h] = t;
    } else if (warp == 1) {
      const double t = warp_ordered_sum(c, n0, 1, N - n0);
      if (threadIdx.x == 32) totals[2 * h + 1] = t;
    }
    return;
  }
  __shared__ int hist[256];
  __shared__ unsigned long long s_prefix;
  __shared__ int s_rank;
  __shared__ unsigned long long skey[kTop];
  __shared__ int sidx[kTop];
  const int count = N - n0, m = min(count, kTop);
  if (m <= 0) return;
  // Radix select, 8 bits a pass from the top: the m-th largest key T; rank = how many keys
  // equal to T the top m hold.
  unsigned long long prefix = 0, mask = 0;
  int rank = m;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSelThreads) hist[b] = 0;
    __syncthreads();
    for (int j = threadIdx.x; j < count; j += kSelThreads) {
      const unsigned long long u = order_bits(c[n0 + j]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int cum = 0, b = 255;
      for (; b > 0 && cum + hist[b] < rank; --b) cum += hist[b];
      s_prefix = prefix | (static_cast<unsigned long long>(b) << shift);
      s_rank = rank - cum;
    }
    __syncthreads();
    prefix = s_prefix;
    rank = s_rank;
    mask |= 255ull << shift;
    __syncthreads();
  }
  // The keys above T, and the first `rank` keys equal to T in index order, into the slots.
  using Scan = cub::BlockScan<int, kSelThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int above = m - rank;
  int carry_gt = 0, carry_eq = 0;
  for (int t0 = 0; t0 < count; t0 += kSelThreads) {
    const int j = t0 + threadIdx.x;
    const unsigned long long u = j < count ? order_bits(c[n0 + j]) : 0;
    const bool gt = j < count && u > prefix, eq = j < count && u == prefix;
    int pre = 0, tile = 0;
    Scan(tmp).ExclusiveSum(int(gt) | (int(eq) << 16), pre, tile);
    if (gt) skey[carry_gt + (pre & 0xffff)] = u, sidx[carry_gt + (pre & 0xffff)] = n0 + j;
    const int e = carry_eq + (pre >> 16);
    if (eq && e < rank) skey[above + e] = u, sidx[above + e] = n0 + j;
    carry_gt += tile & 0xffff;
    carry_eq += tile >> 16;
    __syncthreads();
  }
  for (int i = m + threadIdx.x; i < kTop; i += kSelThreads) skey[i] = 0, sidx[i] = INT_MAX;
  __syncthreads();
  // Bitonic sort of the slots: key descending, index ascending (the padding last).
  for (int k = 2; k <= kTop; k <<= 1)
    for (int jj = k >> 1; jj > 0; jj >>= 1) {
      const int i = threadIdx.x, p = i ^ jj;
      if (i < kTop && p > i) {
        const bool before = skey[i] > skey[p] || (skey[i] == skey[p] && sidx[i] < sidx[p]);  // i already first
        if (before != ((i & k) == 0)) {
          const unsigned long long kk = skey[i];
          skey[i] = skey[p], skey[p] = kk;
          const int ii = sidx[i];
          sidx[i] = sidx[p], sidx[p] = ii;
        }
      }
      __syncthreads();
    }
  for (int i = threadIdx.x; i < m; i += kSelThreads) {
    top_keys[int64_t(h) * kTop + i] = c[sidx[i]];
    top_idx[int64_t(h) * kTop + i] = sidx[i];
  }
}

// Grid (H, ceil(C / 4)), 4 warps, one candidate each: its score as choose_grid_stride's score_of
// (the slash sum in order; the residue histogram with each bin's additions in the top columns'
// order: a batch of 32 columns grouped by bin, each group added by its first lane in lane order).
__global__ void __launch_bounds__(128)
cand_scores_kernel(const double* slash, const double* top_keys, const int32_t* top_idx, const double* totals,
                   const int32_t* cands, GridChoiceShape sh, double* cand_scores) {
  extern __shared__ double dsm[];
  double* tval = dsm;                                        // [kTop]
  int32_t* tidx = reinterpret_cast<int32_t*>(dsm + kTop);    // [kTop]
  double* hist = dsm + kTop + kTop / 2 + (threadIdx.x / 32) * sh.max_cand;
  const int h = blockIdx.x, N = sh.num_keys, lane = threadIdx.x % 32;
  const int m = min(N - sh.n_init, kTop);
  const int64_t base = int64_t(h) * kTop;
  for (int i = threadIdx.x; i < m; i += blockDim.x) tval[i] = top_keys[base + i], tidx[i] = top_idx[base + i];
  __syncthreads();
  const int c = blockIdx.y * 4 + threadIdx.x / 32;
  if (c >= sh.num_cands) return;
  const int s = cands[c];
  const double sl_total = totals[2 * h], col_total = totals[2 * h + 1];
  double best = 0.0;
  if (sh.use_slash && sl_total > 0) {
    const double sum = warp_ordered_sum(slash + int64_t(h) * N, s, s, s < N ? (N - 1) / s : 0);
    best = fmax(best, __ddiv_rn(__dmul_rn(double(s), sum), sl_total));
  }
  if (sh.use_lines && col_total > 0) {
    for (int i = lane; i < s; i += 32) hist[i] = 0.0;
    __syncwarp();
    for (int b = 0; b < m; b += 32) {
      const int i = b + lane;
      const int bin = i < m ? tidx[i] % s : -1 - lane;
      const unsigned same = __match_any_sync(kAll, bin);
      if (i < m && (same & ((1u << lane) - 1)) == 0) {
        double v = hist[bin];
        for (unsigned g = same; g; g &= g - 1) v += tval[b + __ffs(g) - 1];
        hist[bin] = v;
      }
      __syncwarp();
    }
    double mx = -INFINITY;
    for (int i = lane; i < s; i += 32) mx = fmax(mx, hist[i]);
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(kAll, mx, o));
    best = fmax(best, __ddiv_rn(__dmul_rn(double(s), mx), col_total));
  }
  if (lane == 0) cand_scores[int64_t(h) * sh.num_cands + c] = best;
}

// Grid (H), one warp: choose_grid_stride's choice over the scored candidates -- the best score,
// then among the candidates within 0.9 of it the smallest known stride, else the smallest.
__global__ void choose_kernel(const double* cand_scores, const int32_t* cands, const int32_t* known,
                              GridChoiceShape sh, int32_t* strides, double* scores) {
  const int h = blockIdx.x, lane = threadIdx.x;
  const double* sc = cand_scores + int64_t(h) * sh.num_cands;
  double best = 0.0;
  for (int i = lane; i < sh.num_cands; i += 32) best = fmax(best, sc[i]);
  for (int o = 16; o > 0; o >>= 1) best = fmax(best, __shfl_xor_sync(kAll, best, o));
  const double cut = __dmul_rn(0.9, best);
  long long pick = LLONG_MAX;  // (unknown, stride), the smallest wins
  for (int i = lane; i < sh.num_cands; i += 32) {
    if (sc[i] < cut) continue;
    const int s = cands[i];
    bool is_known = false;
    for (int k = 0; k < sh.num_known; ++k) is_known |= known[k] == s;
    pick = min(pick, (static_cast<long long>(is_known ? 0 : 1) << 32) | s);
  }
  for (int o = 16; o > 0; o >>= 1) pick = min(pick, __shfl_xor_sync(kAll, pick, o));
  if (lane == 0) {
    strides[h] = pick == LLONG_MAX ? cands[0] : static_cast<int>(pick & 0xffffffffll);
    scores[h] = best;
  }
}

// Grid (H), one warp: grid_layout_from_phase_mass (the residues by phase mass, descending, ties
// in index order as its stable sort: per pick the first index of the largest untaken mass).
__global__ void layout_kernel(const double* phase_mass, int max_stride, const int32_t* strides, const double* scores,
                              GridChoiceShape sh, DeviceGridLayout* layouts) {
  const int h = blockIdx.x, s = strides[h], lane = threadIdx.x;
  const double* pm = phase_mass + int64_t(h) * max_stride;
  const int nv = min(sh.num_vlines, s);
  int res[kGridChoiceMaxLines];
  for (int t = 0; t < max(nv, 1); ++t) {
    int bi = -1;
    double bv = 0;
    for (int i = lane; i < s; i += 32) {
      bool taken = false;
      for (int u = 0; u < t; ++u) taken |= res[u] == i;
      if (!taken && (bi < 0 || pm[i] > bv)) bi = i, bv = pm[i];
    }
    for (int o = 16; o > 0; o >>= 1) {
      const int oi = __shfl_xor_sync(kAll, bi, o);
      const double ov = __shfl_xor_sync(kAll, bv, o);
      if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bi = oi, bv = ov;
    }
    res[t] = bi;
  }
  if (lane != 0) return;
  DeviceGridLayout l{};
  l.stride = s;
  l.score = scores[h];
  l.phase = res[0];
  l.nv = nv;
  for (int i = 0; i < nv; ++i) l.v[i] = ((res[i] - l.phase) % s + s) % s;
  l.nh = min(min(sh.num_hlines, sh.num_vlines), s);
  for (int i = 0; i < l.nh; ++i) l.h[i] = l.v[i];
  layouts[h] = l;
}

}  // namespace

void grid_choose_strides(const double* col, const double* slash, const int32_t* cands, const int32_t* known,
                         const GridChoiceShape& sh, const GridChoiceScratch& w, int32_t* strides, double* scores,
                         cudaStream_t stream) {
  const int H = sh.num_heads;
  VLM_CHECK(sh.num_cands > 0 && sh.max_cand >= 1 && sh.max_cand <= 4096 && sh.num_vlines <= kGridChoiceMaxLines,
            "grid choice: {} candidates up to {}, {} vertical lines", sh.num_cands, sh.max_cand, sh.num_vlines);
  top_columns_kernel<<<dim3(H, 2), kSelThreads, 0, stream>>>(col, slash, sh, w.totals, w.top_keys, w.top_idx);
  VLM_CUDA_CHECK_LAUNCH();
  const int smem = (kTop + kTop / 2 + 4 * sh.max_cand) * int(sizeof(double));
  const bool ok = allow_dynamic_smem(cand_scores_kernel, (kTop + kTop / 2 + 4 * 4096) * int(sizeof(double)));
  (void)ok;
  cand_scores_kernel<<<dim3(H, (sh.num_cands + 3) / 4), 128, smem, stream>>>(slash, w.top_keys, w.top_idx, w.totals,
                                                                            cands, sh, w.cand_scores);
  VLM_CUDA_CHECK_LAUNCH();
  choose_kernel<<<H, 32, 0, stream>>>(w.cand_scores, cands, known, sh, strides, scores);
  VLM_CUDA_CHECK_LAUNCH();
}

void grid_layouts_from_phase(const double* phase_mass, int max_stride, const int32_t* strides, const double* scores,
                             const GridChoiceShape& sh, DeviceGridLayout* layouts, cudaStream_t stream) {
  layout_kernel<<<sh.num_heads, 32, 0, stream>>>(phase_mass, max_stride, strides, scores, sh, layouts);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
