// The grid heads' online search (kernels/sparse_prefill/grid.h, search_grid) on the GPU for every
// query head of one sequence's chunk: the device computes the last rows' attention and reduces
// it (grid_estimate.cuh: probabilities, column and slash sums, phase masses), the host chooses
// stride and phase with the CPU's own code (choose_grid_stride, grid_layout_from_phase_mass) from
// one download of the sums per step, so the decisions are the CPU's up to summation order.
// Scratch is kept between calls (grown on demand); calls on one stream.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "kernels/cuda/attention/grid_estimate.cuh"
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
  // enqueued ("grid_scores") and after the host's stride choice and the phase masses are back
  // ("grid_choose_host": the downloads, the host's work and the GPU's wait for it).
  std::function<void(const char*)> marker;

 private:
  DeviceBuffer probs_, col_, slash_, strides_, phase_;
  PinnedBuffer sums_h_;  // col then slash [2, H, N] (pinned: one DMA copy of ~2·H·N·8 bytes)
  std::vector<double> phase_h_;
};

}  // namespace vlm::cuda
