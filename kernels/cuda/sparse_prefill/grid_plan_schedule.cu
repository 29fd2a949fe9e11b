// grid_plan_schedule_cta (grid_plan.cuh): the grid plan's schedule -- the sums of the counts, the
// items in cost order, the descs, the split offsets -- in one CTA, where the first multi-launch
// path (CUB scans, an items launch, the split's counts and scans) took ~15 launches of a few us
// each for the few thousand items of a chunk. The order: a bitonic sort in shared memory of unique 64-bit
// keys (cost descending, then item index ascending: the stable order of
// CudaBlockSparsePlan::upload).
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 1024, kItems = 4;
using Scan = cub::BlockScan<int, kThreads>;
// Up to kThreads * kItems items are ordered by a stable radix sort of their costs (descending)
// instead of the bitonic sort (78 barrier-separated stages for 4,096 keys; the radix sort takes
// ceil(bits / 4) passes over the costs' bits).
using RadixSort = cub::BlockRadixSort<unsigned, kThreads, kItems, int>;

// out[i] = v(0) + ... + v(i - 1) for i <= count (out[count]: the total, returned to every thread).
template <class V>
__device__ int cta_exclusive_sum(const V& v, int count, int32_t* out, typename Scan::TempStorage& tmp) {
  int carry = 0;
  for (int t0 = 0; t0 <= count; t0 += kThreads * kItems) {
    const int i0 = t0 + threadIdx.x * kItems;
    int x[kItems], sum = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      x[k] = i0 + k < count ? v(i0 + k) : 0;
      sum += x[k];
    }
    int pre = 0, tile = 0;
    Scan(tmp).ExclusiveSum(sum, pre, tile);
    int run = carry + pre;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (i0 + k <= count) out[i0 + k] = run;
      run += x[k];
    }
    carry += tile;
    __syncthreads();
  }
  return carry;
}

// Ascending bitonic sort of key[P] (P a power of two) by the CTA.
__device__ void cta_bitonic_sort(unsigned long long* key, int P) {
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < P; i += kThreads) {
        const int p = i ^ j;
        if (p > i) {
          const unsigned long long a = key[i], b = key[p];
          if ((a > b) == ((i & k) == 0)) key[i] = b, key[p] = a;
        }
      }
      __syncthreads();
    }
}

// key[i] (i < n) = the bitonic sort's key of the i-th item in the stable cost order (cost
// descending, index ascending), by a stable radix sort of cost + 1 (n <= kThreads * kItems).
__device__ void cta_radix_order(const int32_t* nblocks, const int32_t* ncols, int n, unsigned long long* key,
                                typename RadixSort::TempStorage& tmp, unsigned* max_key) {
  unsigned k[kItems];
  int v[kItems];
  unsigned mx = 0;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int i = threadIdx.x * kItems + j;  // blocked arrangement: the sort is stable in i
    k[j] = i < n ? static_cast<unsigned>(nblocks[i] * 64 + ncols[i]) + 1u : 0u;  // padding sorts last
    v[j] = i;
    mx = max(mx, k[j]);
  }
  if (threadIdx.x == 0) *max_key = 0;
  __syncthreads();
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (threadIdx.x % 32 == 0) atomicMax(max_key, mx);
  __syncthreads();
  const int bits = 32 - __clz(*max_key | 1u);
  RadixSort(tmp).SortDescending(k, v, 0, bits);
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int r = threadIdx.x * kItems + j;
    if (r < n)
      key[r] = (static_cast<unsigned long long>(0x7fffffff - static_cast<int>(k[j] - 1u)) << 32) |
               static_cast<unsigned>(v[j]);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) schedule_kernel(GridPlanScheduleArgs a) {
  extern __shared__ unsigned long long key[];  // [P] when sorting here
  __shared__ typename Scan::TempStorage tmp;
  __shared__ typename RadixSort::TempStorage sort_tmp;
  __shared__ unsigned max_key;
  const GridPlanShape& sh = a.shape;
  const int nqb = sh.num_qblocks(), H = sh.num_heads, n = H * nqb;
  const int32_t *nblocks = a.nblocks, *ncols = a.ncols;
  const int blocks = cta_exclusive_sum([&](int i) { return nblocks[i]; }, n, a.block_off, tmp);
  const int cols = cta_exclusive_sum([&](int i) { return ncols[i]; }, n, a.col_off, tmp);
  if (!a.order && n <= kThreads * kItems) {
    cta_radix_order(nblocks, ncols, n, key, sort_tmp, &max_key);
  } else if (!a.order) {
    int P = 1;
    while (P < n) P <<= 1;
    for (int i = threadIdx.x; i < P; i += kThreads)
      key[i] = i < n ? (static_cast<unsigned long long>(0x7fffffff - (nblocks[i] * 64 + ncols[i])) << 32) |
                           static_cast<unsigned>(i)
                     : ~0ull;
    __syncthreads();
    cta_bitonic_sort(key, P);
  }
  const int32_t* order = a.order;
  auto item = [&](int i) { return order ? order[i] : static_cast<int>(static_cast<unsigned>(key[i])); };
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int hm = item(i);
    reinterpret_cast<int4*>(a.items)[i] = make_int4(0, hm / nqb, hm % nqb, hm / nqb);
  }
  const GridPlanSplit& sp = a.split;
  const SplitPolicy policy = sp.fixed_policy ? sp.fixed : auto_split_policy(blocks, cols, n, sp.resident);
  auto pieces = [&](int i) {
    const int hm = item(i);
    return policy.pieces(nblocks[hm] + (ncols[hm] + 63) / 64);
  };
  cta_exclusive_sum(pieces, n, a.piece_off, tmp);
  cta_exclusive_sum(
      [&](int i) {
        const int np = pieces(i);
        return np > 1 ? np : 0;
      },
      n, a.slot_off, tmp);
  if (threadIdx.x == 0 && sp.count_acc) {
    atomicAdd(sp.count_acc, static_cast<unsigned long long>(blocks));
    atomicAdd(sp.count_acc + 1, static_cast<unsigned long long>(cols));
  }
  for (int h = threadIdx.x; h < H; h += kThreads) {
    SparseHeadDesc x;
    x.q_order = a.out.order_base < 0 ? -1 : a.out.order_base + int64_t(h) * (sh.q_len + sh.num_keys);
    x.k_order = a.out.order_base < 0 ? -1 : x.q_order + sh.q_len;
    x.block_ptr = a.out.ptr_base + int64_t(h) * 2 * (nqb + 1);
    x.col_ptr = x.block_ptr + nqb + 1;
    x.blocks = a.out.blocks_base;
    x.cols = a.out.cols_base;
    x.t0 = a.t0;
    x.q_len = sh.q_len;
    x.num_keys = sh.num_keys;
    x.flags = a.unaligned && a.unaligned[h] ? 0 : kHeadAlignedBlocks;  // grid plans list aligned blocks
    a.descs[h] = x;
  }
}

}  // namespace

void grid_plan_schedule_cta(const GridPlanScheduleArgs& a, cudaStream_t stream) {
  const int n = a.shape.num_heads * a.shape.num_qblocks();
  int P = 1;
  while (P < n) P <<= 1;
  VLM_CHECK(a.order || n <= kGridPlanCtaSortItems, "grid plan schedule: {} items to sort in one CTA", n);
  const int smem = a.order ? 0 : P * static_cast<int>(sizeof(unsigned long long));
  const bool ok = allow_dynamic_smem(schedule_kernel, kGridPlanCtaSortItems * 8);
  (void)ok;
  schedule_kernel<<<1, kThreads, smem, stream>>>(a);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
