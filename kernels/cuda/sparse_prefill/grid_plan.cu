// The grid plan's device kernels (grid_plan.cuh). The orders are closed forms of grid_order
// (group g's run starts at g * base + #{earlier groups with one more member}); a query block's
// key blocks are marked in a shared bitmap exactly as grid_head_plan marks them (per group the
// prefix of its run up to the largest row position that sees the group), then compacted in order.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBlock = 64;

__device__ __forceinline__ int pmod(int a, int s) { return ((a % s) + s) % s; }

// grid_order(s, phase, first, n) in closed form: group g holds the relative indices
// j0(g) + k * s < n, j0(g) = (g + c) mod s with c = (phase - first) mod s. 32-bit arithmetic
// (g * base <= n) and no division past the constructor.
struct GridOrder {
  int s, c, n, base, r;
  __device__ GridOrder(int stride, int phase, int first, int count)
      : s(stride), c(pmod(phase - first, stride)), n(count), base(count / stride), r(count % stride) {}
  __device__ int j0(int g) const { return g + c < s ? g + c : g + c - s; }
  // #{y in [0, x): y mod s < r} for 0 <= x < 2s
  __device__ int f(int x) const { return x < s ? min(x, r) : r + min(x - s, r); }
  __device__ int start(int g) const { return g * base + f(c + g) - f(c); }
  // The relative index at order position i (0 <= i < n).
  __device__ int at(int i) const {
    int lo = 0, hi = s - 1;  // the largest g with start(g) <= i
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (start(mid) <= i) lo = mid;
      else hi = mid - 1;
    }
    return j0(lo) + (i - start(lo)) * s;
  }
};

// The line groups of a layout, their residues mod s computed once per thread.
struct LineSet {
  int g[kGridPlanMaxLines];
  int n;
  __device__ LineSet(const int32_t* lines, int count, int s) : n(count) {
#pragma unroll
    for (int i = 0; i < kGridPlanMaxLines; ++i) g[i] = i < count ? pmod(lines[i], s) : -1;
  }
  __device__ bool has(int x) const {
    bool r = false;
#pragma unroll
    for (int i = 0; i < kGridPlanMaxLines; ++i) r |= g[i] == x;
    return r;
  }
};

// One CTA per (query block m, head h). Marks the key blocks of the query block in `marked`
// (shared, [nkb]) and returns the sink-column bound min(n_init, maxpos + 1) (the columns are the
// j below it whose block is unmarked).
__device__ int mark_query_block(const GridHeadLayout& L, const GridPlanShape& sh, int m, int* lim,
                                unsigned char* marked) {
  __shared__ int lim_all, lim_v, maxpos;
  const int s = L.stride, N = sh.num_keys, off = N - sh.q_len, band = sh.band;
  const GridOrder qo(s, L.phase, off, sh.q_len), ko(s, L.phase, 0, N);
  const LineSet vl(L.v, L.nv, s), hl(L.h, L.nh, s);
  for (int g = threadIdx.x; g < s; g += blockDim.x) lim[g] = -1;
  for (int b = threadIdx.x; b < sh.num_kblocks(); b += blockDim.x) marked[b] = 0;
  if (threadIdx.x == 0) lim_all = lim_v = maxpos = -1;
  __syncthreads();
  const int i = m * kBlock + threadIdx.x;
  if (threadIdx.x < kBlock && i < sh.q_len) {
    const int pos = off + qo.at(i), g = pmod(pos - L.phase, s);
    atomicMax(&maxpos, pos);
    atomicMax(&lim_v, pos);
    if (hl.has(g)) atomicMax(&lim_all, pos);
    if (band >= 0 && 2 * band + 1 >= s) {
      atomicMax(&lim_all, pos);
    } else {
      for (int d = -band; d <= band; ++d) atomicMax(&lim[pmod(g + d, s)], pos);
    }
  }
  __syncthreads();
  for (int g = threadIdx.x; g < s; g += blockDim.x) {
    const int lv = vl.has(g) ? lim_v : -1;
    const int lmt = max(max(lim[g], lim_all), lv);
    const int j0 = g + L.phase < s ? g + L.phase : g + L.phase - s;
    const int n = lmt >= 0 && j0 <= lmt ? (lmt - j0) / s + 1 : 0;
    if (n == 0) continue;
    const int ks = ko.start(g);
    for (int b = ks / kBlock; b <= (ks + n - 1) / kBlock; ++b) marked[b] = 1;
  }
  __syncthreads();
  return min(sh.n_init, maxpos + 1);
}

// Whether sink column j (< N) is gathered: its block in k_order is unmarked.
__device__ __forceinline__ bool sink_col(const GridHeadLayout& L, int N, int j, const unsigned char* marked) {
  const GridOrder ko(L.stride, L.phase, 0, N);
  return !marked[(ko.start(pmod(j - L.phase, L.stride)) + j / L.stride) / kBlock];
}

// Group runs of head h's q_order and k_order, written by the CTAs past the query blocks: CTA
// `cta` of `ctas`, a warp per group (group g's run holds j0(g) + k * s at start(g) + k).
__device__ void write_orders(const GridHeadLayout& L, const GridPlanShape& sh, const GridPlanOut& out, int h,
                             int cta, int ctas) {
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int z = 0; z < 2; ++z) {
    const bool q = z == 1;
    const int n = q ? sh.q_len : sh.num_keys, s = L.stride;
    const GridOrder o(s, L.phase, q ? sh.num_keys - sh.q_len : 0, n);
    int32_t* base = out.data + out.order_base + int64_t(h) * (sh.q_len + sh.num_keys) + (q ? 0 : sh.q_len);
    for (int g = cta * warps + warp; g < s; g += ctas * warps) {
      const int st = o.start(g), end = g + 1 < s ? o.start(g + 1) : n, j0 = o.j0(g);
      for (int k = lane; st + k < end; k += 32) base[st + k] = j0 + k * s;
    }
  }
}

// Grid (nqb + order CTAs, H): x < nqb counts the lists of (head y, query block x); the rest
// write head y's orders.
__global__ void __launch_bounds__(kThreads)
count_kernel(const GridHeadLayout* layouts, GridPlanShape sh, GridPlanOut out, int32_t* nblocks, int32_t* ncols) {
  extern __shared__ int smem[];
  int* lim = smem;
  auto* marked = reinterpret_cast<unsigned char*>(smem + sh.max_stride);
  const int m = blockIdx.x, h = blockIdx.y, nqb = sh.num_qblocks();
  const GridHeadLayout L = layouts[h];
  if (m >= nqb) {
    write_orders(L, sh, out, h, m - nqb, gridDim.x - nqb);
    return;
  }
  const int ncol_bound = mark_query_block(L, sh, m, lim, marked);
  int nb = 0, nc = 0;
  for (int b = threadIdx.x; b < sh.num_kblocks(); b += kThreads) nb += marked[b];
  for (int j = threadIdx.x; j < ncol_bound; j += kThreads) nc += sink_col(L, sh.num_keys, j, marked);
  using Reduce = cub::BlockReduce<int, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  nb = Reduce(tmp).Sum(nb);
  __syncthreads();
  nc = Reduce(tmp).Sum(nc);
  if (threadIdx.x == 0) {
    nblocks[int64_t(h) * nqb + m] = nb;
    ncols[int64_t(h) * nqb + m] = nc;
  }
}

// Grid (nqb, H): the lists of (h, m) and its two pointer entries.
__global__ void __launch_bounds__(kThreads)
fill_lists_kernel(const GridHeadLayout* layouts, GridPlanShape sh, GridPlanOut out) {
  extern __shared__ int smem[];
  int* lim = smem;
  auto* marked = reinterpret_cast<unsigned char*>(smem + sh.max_stride);
  const int m = blockIdx.x, h = blockIdx.y, nqb = gridDim.x, nkb = sh.num_kblocks();
  const GridHeadLayout L = layouts[h];
  const int ncol_bound = mark_query_block(L, sh, m, lim, marked);
  const int64_t hm = int64_t(h) * nqb + m;
  const int bo = out.block_off[hm], co = out.col_off[hm];
  // Each thread compacts a contiguous chunk of the bitmap, in order.
  const int chunk = (nkb + kThreads - 1) / kThreads, b0 = threadIdx.x * chunk, b1 = min(nkb, b0 + chunk);
  int cnt = 0;
  for (int b = b0; b < b1; ++b) cnt += marked[b];
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int at = 0, total = 0;
  Scan(tmp).ExclusiveSum(cnt, at, total);
  int32_t* blocks = out.data + out.blocks_base + bo;
  for (int b = b0; b < b1; ++b)
    if (marked[b]) blocks[at++] = b * kBlock;
  if (threadIdx.x < 32) {  // the sink columns, in order, 32 at a time
    int32_t* cols = out.data + out.cols_base + co;
    int c = 0;
    for (int j0 = 0; j0 < ncol_bound; j0 += 32) {
      const int j = j0 + threadIdx.x;
      const bool take = j < ncol_bound && sink_col(L, sh.num_keys, j, marked);
      const unsigned ballot = __ballot_sync(0xffffffffu, take);
      if (take) cols[c + __popc(ballot & ((1u << threadIdx.x) - 1))] = j;
      c += __popc(ballot);
    }
    if (threadIdx.x == 0) {
      int32_t* bptr = out.data + out.ptr_base + int64_t(h) * 2 * (nqb + 1);
      int32_t* cptr = bptr + nqb + 1;
      bptr[m] = bo;
      cptr[m] = co;
      if (m == nqb - 1) bptr[nqb] = bo + total, cptr[nqb] = co + c;
    }
  }
}

__global__ void cost_kernel(const int32_t* nblocks, const int32_t* ncols, int n, int32_t* keys, int32_t* idx) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  keys[i] = nblocks[i] * kBlock + ncols[i];
  idx[i] = i;
}

int smem_bytes(const GridPlanShape& sh) { return sh.max_stride * 4 + ((sh.num_kblocks() + 15) & ~15); }

}  // namespace

void grid_plan_count(const GridHeadLayout* layouts, const GridPlanShape& sh, const GridPlanOut& out, int32_t* nblocks,
                     int32_t* ncols, cudaStream_t stream) {
  const bool ok = allow_dynamic_smem(count_kernel, 200 * 1024);
  (void)ok;
  const int order_ctas = (std::min(sh.max_stride, 1024) + kThreads / 32 - 1) / (kThreads / 32);
  count_kernel<<<dim3(sh.num_qblocks() + order_ctas, sh.num_heads), kThreads, smem_bytes(sh), stream>>>(
      layouts, sh, out, nblocks, ncols);
  VLM_CUDA_CHECK_LAUNCH();
}

void grid_plan_fill(const GridHeadLayout* layouts, const GridPlanShape& sh, const GridPlanOut& out,
                    cudaStream_t stream) {
  const bool ok = allow_dynamic_smem(fill_lists_kernel, 200 * 1024);
  (void)ok;
  fill_lists_kernel<<<dim3(sh.num_qblocks(), sh.num_heads), kThreads, smem_bytes(sh), stream>>>(layouts, sh, out);
  VLM_CUDA_CHECK_LAUNCH();
}

size_t grid_plan_schedule_temp_bytes(int n) {
  size_t bytes = 0;
  VLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                           static_cast<int32_t*>(nullptr),
                                                           static_cast<const int32_t*>(nullptr),
                                                           static_cast<int32_t*>(nullptr), n));
  return bytes;
}

void grid_plan_sort(const GridPlanSchedule& s, cudaStream_t stream) {
  const int n = s.n;
  cost_kernel<<<(n + 255) / 256, 256, 0, stream>>>(s.nblocks, s.ncols, n, s.keys_in, s.idx_in);
  VLM_CUDA_CHECK_LAUNCH();
  size_t bytes = s.temp_bytes;
  VLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(s.temp, bytes, s.keys_in, s.keys_out, s.idx_in, s.idx_out,
                                                           n, 0, 32, stream));
}

}  // namespace vlm::cuda
