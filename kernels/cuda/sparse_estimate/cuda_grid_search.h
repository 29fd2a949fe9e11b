// The grid heads' online search (kernels/sparse_prefill/grid.h, search_grid) on the GPU for every
// query head of one sequence's chunk: the device computes the last rows' attention and reduces
// it (grid_estimate.cuh: probabilities, column and slash sums, phase masses). By default
// (device_choice) the device also chooses stride and phase (grid_choose_strides,
// grid_layouts_from_phase: the CPU's choose_grid_stride and grid_layout_from_phase_mass in the
// host's summation orders) and the host downloads the layouts once (one sync per search); else
// (device_choice false, or more than kGridChoiceMaxLines vertical lines, or a candidate stride
// over 4096) the host chooses with the CPU's own code from downloads of the sums (two syncs). The
// decisions are the CPU's up to the order of the device's per-key sums.
// Scratch is kept between calls (grown on demand); calls on one stream.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/sparse_prefill/grid.h"

namespace vlm::cuda {

class CudaGridSearch {
 public:
  // q[T, H, D] (device, dtype act), block_table: the sequence's block-table row (device). Returns
  // one layout per query head (params.stride > 0: that stride, phase searched). Synchronizes
  // `stream` twice (the downloads).
  std::vector<GridLayout> search(const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv,
                                 const int32_t* block_table, const GridEstimateShape& shape, float scale,
                                 const GridParams& params, std::span<const int32_t> known_strides,
                                 cudaStream_t stream);

  // Optional (a profiler's hook): called on the host after the device's scores and line sums are
  // enqueued ("grid_scores") and after the layouts are on the host ("grid_choose_host": the
  // choice, on the device or the host, the downloads and the GPU's wait for the host).
  std::function<void(const char*)> marker;
  bool device_choice = true;  // the stride and layout choice on the device (above)

 private:
  std::vector<GridLayout> choose_on_device(const GridEstimateShape& shape, const GridParams& params,
                                           const std::vector<int32_t>& cands, std::span<const int32_t> known,
                                           cudaStream_t stream);

  DeviceBuffer probs_, col_, slash_, strides_, phase_;
  DeviceBuffer cands_, choice_f64_, choice_i32_, layouts_d_;
  PinnedBuffer layouts_h_;
  PinnedBuffer sums_h_;  // col then slash [2, H, N] (pinned: one DMA copy of ~2·H·N·8 bytes)
  std::vector<double> phase_h_;
};

}  // namespace vlm::cuda
