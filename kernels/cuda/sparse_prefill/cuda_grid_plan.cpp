#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "kernels/core/check.h"

namespace vlm::cuda {
const GridHeadLayout* CudaGridPlan::upload_layouts(const std::vector<GridHeadLayout>& dl, int key,
                                                  cudaStream_t stream) {
  const size_t bytes = dl.size() * sizeof(GridHeadLayout);
  DeviceBuffer* target = &layouts_;
  if (key >= 0) {
    if (static_cast<int>(kept_.size()) <= key) kept_.resize(key + 1);
    KeptLayouts& k = kept_[key];
    if (k.host.size() == dl.size() && std::memcmp(k.host.data(), dl.data(), bytes) == 0)
      return k.device.as<GridHeadLayout>();  // unchanged: the copy made by an earlier build on the stream
    k.host = dl;
    target = &k.device;
  }
  target->grow(bytes);
  Stage& st = stages_[next_stage_];
  next_stage_ = (next_stage_ + 1) % kStages;
  if (st.copied) VLM_CUDA_CHECK(cudaEventSynchronize(st.copied));  // the stage's last copy has read it
  else VLM_CUDA_CHECK(cudaEventCreateWithFlags(&st.copied, cudaEventDisableTiming));
  st.host.reserve(bytes);
  std::memcpy(st.host.get(), dl.data(), bytes);
  VLM_CUDA_CHECK(cudaMemcpyAsync(target->get(), st.host.get(), bytes, cudaMemcpyHostToDevice, stream));
  VLM_CUDA_CHECK(cudaEventRecord(st.copied, stream));
  return target->as<GridHeadLayout>();
}

void CudaGridPlan::build(std::span<const GridLayout> layouts, const GridParams& p, int t0, int q_len, int N,
                         cudaStream_t stream, unsigned long long* count_acc, int layout_key) {
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
  const GridHeadLayout* d_layouts = upload_layouts(dl, layout_key, stream);
  const int nqb = sh.num_qblocks(), nkb = sh.num_kblocks(), n = H * nqb;
  VLM_CHECK(sh.max_stride * 4 + nkb + 16 <= 200 * 1024, "grid plan on the GPU: {} keys too many", N);

  const size_t n1 = static_cast<size_t>(n) + 1;
  scratch_.grow(grid_plan_schedule_words(n) * sizeof(int32_t));
  GridPlanSchedule sc = grid_plan_schedule_over(scratch_.as<int32_t>(), n);
  totals_[0] = sc.block_off + n;
  totals_[1] = sc.col_off + n;

  // The plan buffer: items [n, 4], descs [H], orders, pointers, blocks, cols; the lists at their
  // bounds (a query block lists at most every key block and n_init sink columns).
  const int64_t max_cols_per_item = std::min(sh.n_init, N);
  const int64_t blocks_bound = static_cast<int64_t>(n) * nkb, cols_bound = n * max_cols_per_item;
  const int64_t item_words = 4 * static_cast<int64_t>(n);
  const int64_t desc_words = static_cast<int64_t>(H) * (sizeof(SparseHeadDesc) / 4);
  GridPlanOut out{};
  out.order_base = item_words + desc_words;
  out.ptr_base = out.order_base + static_cast<int64_t>(H) * (q_len + N);
  out.blocks_base = out.ptr_base + static_cast<int64_t>(H) * 2 * (nqb + 1);
  out.cols_base = out.blocks_base + blocks_bound;
  const int64_t words = out.cols_base + cols_bound;
  VLM_CHECK(words < (int64_t(1) << 31), "grid plan of {} words too large", words);
  plan_.grow(static_cast<size_t>(words) * sizeof(int32_t));
  int32_t* const d = plan_.as<int32_t>();
  out.data = d;
  out.block_off = sc.block_off;
  out.col_off = sc.col_off;
  auto* descs = reinterpret_cast<SparseHeadDesc*>(d + item_words);

  // Four launches: the counts (and the orders), the schedule (one CTA: sums, cost order, items,
  // descs, the split), the lists -- plus the CUB sort between the first two for more items than
  // one CTA sorts.
  int32_t* const nblocks = scratch_.as<int32_t>();  // sc.nblocks, sc.ncols
  grid_plan_count(d_layouts, sh, out, nblocks, nblocks + n1, stream);
  GridPlanScheduleArgs args;
  args.shape = sh;
  args.out = out;
  args.descs = descs;
  grid_plan_run_schedule(sc, args, t0, blocks_bound + n * ((max_cols_per_item + 63) / 64) + n, count_acc, temp_,
                         split_, partial_, view_, stream);
  grid_plan_fill(d_layouts, sh, out, stream);
  num_heads_ = H;
  stream_ = stream;
  causal_ = H * causal_key_blocks(q_len, N, 64, 64);
}

CudaGridPlan::~CudaGridPlan() {
  for (Stage& st : stages_)
    if (st.copied) {
      cudaEventSynchronize(st.copied);
      cudaEventDestroy(st.copied);
    }
}

BlockCounts CudaGridPlan::block_counts() const { return download_block_counts(totals_, causal_, stream_); }

BlockCounts download_block_counts(const int32_t* const totals[2], double causal, cudaStream_t stream) {
  BlockCounts c;
  if (!totals[0]) return c;
  int32_t t[2] = {0, 0};
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < 2; ++i) VLM_CUDA_CHECK(cudaMemcpy(&t[i], totals[i], sizeof(int32_t), cudaMemcpyDeviceToHost));
  c.computed = t[0] + t[1] / 64.0;
  c.causal = causal;
  return c;
}

void grid_plan_run_schedule(GridPlanSchedule& sc, GridPlanScheduleArgs& args, int t0, int64_t tiles_bound,
                            unsigned long long* count_acc, DeviceBuffer& temp, DeviceBuffer& split_buf,
                            DeviceBuffer& partial_buf, SparsePlanView& view, cudaStream_t stream) {
  const int n = sc.n;
  const bool sort_here = n <= kGridPlanCtaSortItems;
  if (!sort_here) {
    temp.grow(sc.temp_bytes);
    sc.temp = temp.get();
    grid_plan_sort(sc, stream);
  }
  args.t0 = t0;
  args.nblocks = sc.nblocks;
  args.ncols = sc.ncols;
  args.block_off = sc.block_off;
  args.col_off = sc.col_off;
  args.order = sort_here ? nullptr : sc.idx_out;
  args.items = args.out.data;
  view = SparsePlanView{};
  grid_plan_device_split(n, tiles_bound, count_acc, split_buf, partial_buf, view, args);
  grid_plan_schedule_cta(args, stream);
  view.data = args.out.data;
  view.items = args.out.data;
  view.descs = args.descs;
  view.num_items = n;
}

void grid_plan_device_split(int n, int64_t tiles_bound, unsigned long long* count_acc, DeviceBuffer& split_buf,
                            DeviceBuffer& partial_buf, SparsePlanView& view, GridPlanScheduleArgs& args) {
  GridPlanSplit& split = args.split;
  split.fixed_policy = block_sparse_split_fixed();
  split.fixed = block_sparse_split_policy(0, 0, n);
  split.resident = block_sparse_policy_ctas();
  split.count_acc = count_acc;
  const size_t n1 = static_cast<size_t>(n) + 1;
  split_buf.grow((2 * n1 + 1) * sizeof(int32_t));
  int32_t* sw = split_buf.as<int32_t>();
  args.piece_off = sw;
  args.slot_off = sw + n1;
  // The launch's bound from the policy's shortest piece over the tiles' bound.
  const bool may_split = !split.fixed_policy || split.fixed.piece > 0;
  const int min_piece = split.fixed_policy ? std::max(split.fixed.piece, 1) : kMinSplitPiece;
  const int64_t pieces_bound = may_split ? n + tiles_bound / min_piece + 1 : n;
  int64_t slots_bound = 0;
  if (may_split)
    slots_bound = split.fixed_policy ? block_sparse_split_bounds(split.fixed, tiles_bound, 0, 0).slots
                                     : kMaxSplitSlots + 1;
  view.piece_off = sw;
  view.slot_off = sw + n1;
  view.queue = sw + 2 * n1;
  view.max_pieces = static_cast<int>(std::min<int64_t>(pieces_bound, INT_MAX));
  view.partial = nullptr;
  if (slots_bound > 0) {
    // The automatic policy's bound at once (a growing bound would reallocate, a device-wide sync).
    partial_buf.grow(static_cast<size_t>(std::max(slots_bound, kMaxSplitSlots + 1)) * kSplitSlotFloats * sizeof(float));
    view.partial = partial_buf.as<float>();
  }
}

size_t grid_plan_schedule_words(int n) { return 4 * (static_cast<size_t>(n) + 1) + 4 * static_cast<size_t>(n); }

GridPlanSchedule grid_plan_schedule_over(int32_t* w, int n) {
  const size_t n1 = static_cast<size_t>(n) + 1;
  GridPlanSchedule sc;
  sc.n = n;
  sc.nblocks = w, sc.ncols = w + n1;
  sc.block_off = w + 2 * n1, sc.col_off = w + 3 * n1;
  sc.keys_in = w + 4 * n1, sc.keys_out = sc.keys_in + n, sc.idx_in = sc.keys_out + n, sc.idx_out = sc.idx_in + n;
  sc.temp_bytes = grid_plan_schedule_temp_bytes(n);
  return sc;
}

}  // namespace vlm::cuda
