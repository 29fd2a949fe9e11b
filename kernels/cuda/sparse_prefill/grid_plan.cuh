// Device half of CudaGridPlan (cuda_grid_plan.h): grid_head_plan (kernels/sparse_prefill/grid.h)
// of every query head of one sequence's chunk, built on the GPU from the heads' layouts. Plain
// C++17 (included by the .cu and by cuda_grid_plan.cpp).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda {

constexpr int kGridPlanMaxLines = 8;  // vertical / horizontal line groups per head
constexpr int kGridPlanMaxStride = 4096;

// One head's layout (GridLayout with the GridParams switches applied: nv = 0 without vertical
// lines, nh = 0 without horizontal lines).
struct GridHeadLayout {
  int32_t stride, phase, nv, nh;
  int32_t v[kGridPlanMaxLines], h[kGridPlanMaxLines];
};

struct GridPlanShape {
  int num_heads = 0;   // H
  int q_len = 0;       // the chunk's rows: positions [num_keys - q_len, num_keys)
  int num_keys = 0;    // N
  int band = 1;        // slash band half-width, -1: no slash lines
  int n_init = 64;     // sink keys
  int max_stride = 1;  // >= every head's stride, <= kGridPlanMaxStride
  constexpr int num_qblocks() const { return (q_len + 63) / 64; }
  constexpr int num_kblocks() const { return (num_keys + 63) / 64; }
};

// Where pass 2 writes, per head h (int32 offsets into data): q_order at order_base + h * (q_len +
// N), k_order right after it; block_ptr at ptr_base + h * 2 * (nqb + 1), col_ptr right after it,
// both absolute: block_ptr[m] = block_off[h * nqb + m] into the blocks of all heads at
// blocks_base (cols likewise); block_off and col_off are the exclusive sums of pass 1's counts.
struct GridPlanOut {
  int32_t* data;
  int64_t order_base, ptr_base, blocks_base, cols_base;
  const int32_t* block_off;  // [H * nqb]
  const int32_t* col_off;    // [H * nqb]
};

// Pass 1: nblocks[H, nqb], ncols[H, nqb] = the listed key blocks and gathered sink columns of each
// (head, 64-row query block); the same launch writes every head's q_order and k_order at `out`.
void grid_plan_count(const GridHeadLayout* layouts /*[H]*/, const GridPlanShape& shape, const GridPlanOut& out,
                     int32_t* nblocks, int32_t* ncols, cudaStream_t stream);

// Pass 2: the pointers and lists of every head (the lists equal grid_head_plan's), at the
// offsets out.block_off / out.col_off.
void grid_plan_fill(const GridHeadLayout* layouts /*[H]*/, const GridPlanShape& shape, const GridPlanOut& out,
                    cudaStream_t stream);

// The schedule's scratch over n = H * nqb items (grid_plan_schedule_over): the counts nblocks /
// ncols [n + 1] (written by the plan's count pass), their exclusive sums block_off / col_off
// [n + 1] (grid_plan_schedule_cta writes them; entry n: the total), and, for more items than one
// CTA sorts, grid_plan_sort's keys and values (idx_out: h * nqb + m sorted by blocks * 64 + cols,
// descending, stable, as CudaBlockSparsePlan::upload orders them; temp: temp_bytes).
struct GridPlanSchedule {
  int n = 0;  // H * nqb
  const int32_t *nblocks = nullptr, *ncols = nullptr;  // [n + 1]
  int32_t *block_off = nullptr, *col_off = nullptr;    // [n + 1]
  int32_t *keys_in = nullptr, *keys_out = nullptr, *idx_in = nullptr, *idx_out = nullptr;  // [n]
  void* temp = nullptr;
  size_t temp_bytes = 0;
};
size_t grid_plan_schedule_temp_bytes(int n);
// The CUB sort (idx_out from the counts).
void grid_plan_sort(const GridPlanSchedule& schedule, cudaStream_t stream);
// The schedule's arrays over the scratch w of n items: grid_plan_schedule_words(n) int32 words,
// counts 2 (n + 1) (nblocks, then ncols), offsets 2 (n + 1), sort keys and values 4 n; temp_bytes
// set, temp left to the caller. The device plans (grid, vertical-slash, XAttention) share it.
size_t grid_plan_schedule_words(int n);
GridPlanSchedule grid_plan_schedule_over(int32_t* w, int n);

// The split policy's inputs for grid_plan_schedule_cta: `fixed` when fixed_policy, else
// auto_split_policy from the totals (block_off[n], col_off[n]) for `resident` CTAs, computed on
// the device. count_acc (optional, device [2]): the totals (listed key blocks, gathered columns)
// are added to it.
struct GridPlanSplit {
  SplitPolicy fixed;
  bool fixed_policy = false;
  int resident = 1;
  unsigned long long* count_acc = nullptr;
};

// The grid plan's schedule in one launch of one CTA (between grid_plan_count and grid_plan_fill):
// block_off / col_off (the exclusive sums of the counts), the items in cost order (sorted in shared memory
// when order is nullptr, n <= kGridPlanCtaSortItems; else order[n] from grid_plan_sort), the
// descs (each head's q_order, k_order, pointers and the shared lists at `out`'s offsets, rows t0..
// of the batch), the split (piece_off / slot_off [n + 1]: the exclusive sums of each item's pieces
// and slots under the policy, tiles = nblocks + ceil(ncols / 64) of the item) and count_acc. n = H * nqb.
constexpr int kGridPlanCtaSortItems = 16384;
struct GridPlanScheduleArgs {
  GridPlanShape shape;
  GridPlanOut out;
  int t0 = 0;
  const int32_t *nblocks = nullptr, *ncols = nullptr;  // [n]
  int32_t *block_off = nullptr, *col_off = nullptr;    // [n + 1]
  const int32_t* order = nullptr;                      // [n] or nullptr
  int32_t* items = nullptr;                            // [n, 4]
  SparseHeadDesc* descs = nullptr;                     // [H]
  GridPlanSplit split;
  int32_t *piece_off = nullptr, *slot_off = nullptr;   // [n + 1]
  // out.order_base < 0: no orders (q_order = k_order = -1). unaligned[H] (device, optional): a
  // head's flags without kHeadAlignedBlocks where nonzero.
  const int32_t* unaligned = nullptr;
};
void grid_plan_schedule_cta(const GridPlanScheduleArgs& args, cudaStream_t stream);

// Everything between a device plan's count pass and its fill pass (CudaGridPlan,
// CudaVerticalSlashPlan, CudaXAttentionPlan): the CUB sort when there are more than kGridPlanCtaSortItems items (temp
// grown), the split (grid_plan_device_split) and grid_plan_schedule_cta over sc (args' shape, out,
// descs and unaligned set by the caller; the items at out.data), and view (data, items, descs,
// num_items and the split's fields).
void grid_plan_run_schedule(GridPlanSchedule& sc, GridPlanScheduleArgs& args, int t0, int64_t tiles_bound,
                            unsigned long long* count_acc, DeviceBuffer& temp, DeviceBuffer& split_buf,
                            DeviceBuffer& partial_buf, SparsePlanView& view, cudaStream_t stream);

// The split on the device for grid_plan_schedule_cta's plan of n items holding at most
// tiles_bound tiles in all: args.split (the automatic policy from the totals, or the knob's;
// count_acc), args.piece_off / slot_off in split_buf (with the queue after them), and view's
// piece_off, slot_off, queue, max_pieces (the bound from the policy's shortest piece) and partial
// (partial_buf at the policy's slot bound).
void grid_plan_device_split(int n, int64_t tiles_bound, unsigned long long* count_acc, DeviceBuffer& split_buf,
                            DeviceBuffer& partial_buf, SparsePlanView& view, GridPlanScheduleArgs& args);

}  // namespace vlm::cuda
