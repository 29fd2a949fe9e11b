#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "kernels/core/check.h"

namespace vlm::cuda {

void CudaGridPlan::build(std::span<const GridLayout> layouts, const GridParams& p, int t0, int q_len, int N,
                         cudaStream_t stream) {
  const int H = static_cast<int>(layouts.size());
  VLM_CHECK(H > 0 && q_len > 0 && N >= q_len, "grid plan: {} heads q_len {} keys {}", H, q_len, N);
  GridPlanShape sh;
  sh.num_heads = H;
  sh.q_len = q_len;
  sh.num_keys = N;
  sh.band = p.use_slash ? std::max(p.band, 0) : -1;
  sh.n_init = std::max(p.n_init, 0);
  std::vector<GridHeadLayout> dl(H);
  for (int h = 0; h < H; ++h) {
    const GridLayout& l = layouts[h];
    VLM_CHECK(l.stride > 0 && l.stride <= kGridPlanMaxStride, "grid plan on the GPU: stride {} (at most {})", l.stride,
              kGridPlanMaxStride);
    GridHeadLayout& d = dl[h];
    std::memset(&d, 0, sizeof d);
    d.stride = l.stride;
    d.phase = ((l.phase % l.stride) + l.stride) % l.stride;
    d.nv = p.use_vline ? static_cast<int>(l.vgroups.size()) : 0;
    d.nh = p.use_hline ? static_cast<int>(l.hgroups.size()) : 0;
    VLM_CHECK(d.nv <= kGridPlanMaxLines && d.nh <= kGridPlanMaxLines, "grid plan on the GPU: {} / {} line groups",
              d.nv, d.nh);
    std::copy_n(l.vgroups.begin(), d.nv, d.v);
    std::copy_n(l.hgroups.begin(), d.nh, d.h);
    sh.max_stride = std::max(sh.max_stride, l.stride);
  }
  const int nqb = sh.num_qblocks(), n = H * nqb;
  VLM_CHECK(sh.max_stride * 4 + sh.num_kblocks() + 16 <= 200 * 1024, "grid plan on the GPU: {} keys too many",
            N);
  // A pageable source: the copy has left `dl` when the call returns.
  layouts_.reserve(H * sizeof(GridHeadLayout));
  VLM_CUDA_CHECK(cudaMemcpyAsync(layouts_.get(), dl.data(), H * sizeof(GridHeadLayout), cudaMemcpyHostToDevice, stream));
  const GridHeadLayout* d_layouts = layouts_.as<GridHeadLayout>();

  // Scratch: counts (2 x (n + 1)), offsets (2 x (n + 1)), sort keys and values (4 x n).
  const size_t n1 = static_cast<size_t>(n) + 1;
  scratch_.reserve((4 * n1 + 4 * static_cast<size_t>(n)) * sizeof(int32_t));
  int32_t* w = scratch_.as<int32_t>();
  GridPlanSchedule sc;
  sc.n = n;
  int32_t* nblocks = w;
  int32_t* ncols = w + n1;
  sc.nblocks = nblocks, sc.ncols = ncols;
  sc.block_off = w + 2 * n1, sc.col_off = w + 3 * n1;
  sc.keys_in = w + 4 * n1, sc.keys_out = sc.keys_in + n, sc.idx_in = sc.keys_out + n, sc.idx_out = sc.idx_in + n;
  sc.temp_bytes = grid_plan_schedule_temp_bytes(n);
  temp_.reserve(sc.temp_bytes);
  sc.temp = temp_.get();
  VLM_CUDA_CHECK(cudaMemsetAsync(nblocks + n, 0, sizeof(int32_t), stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(ncols + n, 0, sizeof(int32_t), stream));
  grid_plan_count(d_layouts, sh, nblocks, ncols, stream);
  grid_plan_schedule(sc, stream);
  VLM_CUDA_CHECK(cudaMemcpyAsync(&totals_[0], sc.block_off + n, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaMemcpyAsync(&totals_[1], sc.col_off + n, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));

  // The plan buffer: items [n, 4], descs [H], orders, pointers, blocks, cols.
  const int64_t item_words = 4 * static_cast<int64_t>(n);
  const int64_t desc_words = static_cast<int64_t>(H) * (sizeof(SparseHeadDesc) / 4);
  GridPlanOut out{};
  out.order_base = item_words + desc_words;
  out.ptr_base = out.order_base + static_cast<int64_t>(H) * (q_len + N);
  out.blocks_base = out.ptr_base + static_cast<int64_t>(H) * 2 * (nqb + 1);
  out.cols_base = out.blocks_base + totals_[0];
  const int64_t words = out.cols_base + totals_[1];
  VLM_CHECK(words < (int64_t(1) << 31), "grid plan of {} words too large", words);
  plan_.reserve(static_cast<size_t>(words) * sizeof(int32_t));
  int32_t* const d = plan_.as<int32_t>();
  out.data = d;
  out.block_off = sc.block_off;
  out.col_off = sc.col_off;
  grid_plan_fill(d_layouts, sh, out, stream);
  grid_plan_items(sc.idx_out, n, nqb, d, stream);
  // The split of long items (after the sort in stream order; temp_ reused).
  const SplitPolicy policy = block_sparse_split_policy(totals_[0], totals_[1], n);
  const SplitBounds bounds = block_sparse_split_bounds(policy, totals_[0], totals_[1], n);
  view_.piece_off = view_.slot_off = nullptr;
  view_.partial = nullptr;
  view_.max_pieces = n;
  if (policy.piece > 0) {
    split_.reserve(4 * n1 * sizeof(int32_t));
    int32_t* sw = split_.as<int32_t>();
    grid_plan_split(sc, policy, sw, sw + 2 * n1, sw + 3 * n1, stream);
    // The automatic policy's bound at once (a growing bound would reallocate, a device-wide sync,
    // layer after layer).
    partial_.reserve(static_cast<size_t>(std::max(bounds.slots, kMaxSplitSlots)) * kSplitSlotFloats * sizeof(float));
    VLM_CHECK(bounds.pieces < (int64_t(1) << 31), "grid plan: {} pieces", bounds.pieces);
    view_.piece_off = sw + 2 * n1;
    view_.slot_off = sw + 3 * n1;
    view_.max_pieces = static_cast<int>(bounds.pieces);
    view_.partial = partial_.as<float>();
  }
  std::vector<SparseHeadDesc> descs(H);
  for (int h = 0; h < H; ++h) {
    SparseHeadDesc& x = descs[h];
    x.q_order = out.order_base + static_cast<int64_t>(h) * (q_len + N);
    x.k_order = x.q_order + q_len;
    x.block_ptr = out.ptr_base + static_cast<int64_t>(h) * 2 * (nqb + 1);
    x.col_ptr = x.block_ptr + nqb + 1;
    x.blocks = out.blocks_base;
    x.cols = out.cols_base;
    x.t0 = t0;
    x.q_len = q_len;
    x.num_keys = N;
    x.pad = 0;
  }
  VLM_CUDA_CHECK(cudaMemcpyAsync(d + item_words, descs.data(), H * sizeof(SparseHeadDesc), cudaMemcpyHostToDevice,
                                 stream));
  view_.data = d;
  view_.items = d;
  view_.descs = reinterpret_cast<const SparseHeadDesc*>(d + item_words);
  view_.num_items = n;
  num_heads_ = H;
  counts_ = {};
  counts_.computed = totals_[0] + totals_[1] / 64.0;
  for (int m = 0; m < nqb; ++m) counts_.causal += (N - q_len + std::min(q_len, (m + 1) * 64) - 1) / 64 + 1;
  counts_.causal *= H;
}

}  // namespace vlm::cuda
