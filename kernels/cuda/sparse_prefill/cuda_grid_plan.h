// The grid heads' plans (MMInference's grid pattern, kernels/sparse_prefill/grid.h) built on the
// GPU: from one layout per query head (CudaGridSearch), the plan of every head of one sequence's
// chunk -- grid permutations of rows and keys, the block lists of each 64-row query block, the
// sink columns, the work items in cost order -- is made on the device in two passes (count, then
// fill at the scanned offsets) with the schedule between them in one CTA (grid_plan_schedule_cta:
// the sums, the cost order by a bitonic sort in shared memory, the items, descs and split; the
// orders are written by the count launch: four launches with the layouts' copy, where the first
// version took ~20) and no host synchronization: the lists are sized by their bound
// (every query block over every key block, n_init sink columns), the layouts and the head
// descriptors are made on the device (the layouts go up through a pinned staging ring), and the split of long items (SplitPolicy:
// the automatic policy computed on the device from the totals, or the knob's) is scanned there;
// the attention runs a resident grid over the pieces (SparsePlanView::queue). No per-head host
// work and no plan upload. The lists equal grid_head_plan's (test_cuda_grid_plan compares them
// array by array, and the attention outputs bit for bit); the items are ordered like
// CudaBlockSparsePlan::upload's (stable, by cost), so the attention runs the same schedule.
// Block pointers are absolute into the lists of all heads (the kernel only takes differences).
// Buffers are kept between calls (grown on demand, by half again: a growth frees and so
// synchronizes the device); calls on one stream.
#pragma once

#include <span>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/sparse_prefill/grid.h"

namespace vlm::cuda {

class CudaGridPlan {
 public:
  // layouts[H]: each head's layout (strides <= kGridPlanMaxStride, at most kGridPlanMaxLines
  // vertical / horizontal groups); params: the switches (band, lines, n_init). t0: the chunk's first
  // row in q; rows are positions [num_keys - q_len, num_keys) of the sequence (batch sequence 0).
  // Asynchronous on `stream` (no host synchronization, no host memory read by the stream).
  // count_acc (optional, device [2]): the plan's listed key blocks and gathered columns are added
  // to it on the stream (usage's density without a download per layer). layout_key >= 0 (the
  // decoder: the layer): the device copy of the layouts is kept under that key and uploaded again
  // only when they differ from that key's last build (a chunked prompt's later chunks reuse the
  // first chunk's layouts: no copy per layer, whose transfer and its wait cost ~10 us of GPU
  // timeline); < 0: uploaded every build.
  void build(std::span<const GridLayout> layouts, const GridParams& params, int t0, int q_len, int num_keys,
             cudaStream_t stream, unsigned long long* count_acc = nullptr, int layout_key = -1);

  SparsePlanView view() const { return view_; }
  int num_heads() const { return num_heads_; }
  // The causal key blocks of the last build (host arithmetic, no synchronization).
  double causal_blocks() const { return causal_; }
  // Computed / causal key blocks of the last build: synchronizes its stream and downloads the
  // totals (tests and benches; the decoder passes count_acc instead).
  BlockCounts block_counts() const;
  double block_density() const {
    const BlockCounts c = block_counts();
    return c.causal > 0 ? c.computed / c.causal : 1.0;
  }

  CudaGridPlan() = default;
  CudaGridPlan(const CudaGridPlan&) = delete;
  CudaGridPlan& operator=(const CudaGridPlan&) = delete;
  ~CudaGridPlan();

 private:
  // Pinned staging of the layouts' upload, a ring of kStages: a stage is rewritten once the copy
  // that read it is done (its event), so the host waits only when it runs kStages builds ahead.
  static constexpr int kStages = 8;
  struct Stage {
    PinnedBuffer host;
    cudaEvent_t copied = nullptr;
  };
  Stage stages_[kStages];
  int next_stage_ = 0;

  // The device layouts of one key (build's layout_key) and the host copy they were made from.
  struct KeptLayouts {
    std::vector<GridHeadLayout> host;
    DeviceBuffer device;
  };
  std::vector<KeptLayouts> kept_;
  // The device copy of dl[H] for this build: kept_[key]'s when unchanged, else uploaded (through
  // the staging ring) into kept_[key] or, key < 0, into layouts_.
  const GridHeadLayout* upload_layouts(const std::vector<GridHeadLayout>& dl, int key, cudaStream_t stream);

  DeviceBuffer layouts_, scratch_, temp_, plan_, split_, partial_;
  SparsePlanView view_;
  int num_heads_ = 0;
  double causal_ = 0;
  const int32_t* totals_[2] = {nullptr, nullptr};  // device: the last build's list totals
  cudaStream_t stream_ = nullptr;                  // the last build's
};

// Computed / causal key blocks of a device plan from its list totals (device: blocks, columns);
// synchronizes `stream` (tests and benches).
BlockCounts download_block_counts(const int32_t* const totals[2], double causal, cudaStream_t stream);

}  // namespace vlm::cuda
