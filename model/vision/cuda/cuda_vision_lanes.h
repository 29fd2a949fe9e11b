// CudaVisionLanes: where a GPU vision runner's calls over the layers (CudaLayers, the
// architectures of model/arch) work. Memory is reserved once (reserve) for calls over at most
// `rows` rows (patches, or images): the architecture's plan buffers at their largest (Residual
// f32, Hidden in the compute dtype), the layers' scratch slots (bytes per row, stated by the
// runner) and the metadata ints (CudaStepInts). A call over rows [row0, row0 + n) of the
// reservation (one group of a pipelined encode) gets a CudaStep whose buffers and scratch are its
// own part of that memory: a buffer of n / 4 rows in the call starts at row0 / 4. A lane
// is one stream's state: its cuBLASLt workspace and cuDNN plans (CudaVisionCudnn), as the
// hand-written towers kept one per stream. Steps run GEMMs only (no GEMV, no folded norm).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "model/layers/act.h"
#include "model/layers/cuda/cuda_step.h"
#include "model/vision/cuda/cuda_vision_cudnn.h"

namespace vlm {

class CudaVisionLanes {
 public:
  static constexpr int kLanes = 2;
  using ScratchPerRow = std::array<int64_t, CudaScratch::kNumSlots>;  // bytes per reserved row, by slot

  // lanes: how many (1 or kLanes; each holds a 32 MiB cuBLASLt workspace).
  explicit CudaVisionLanes(DType dt, int lanes = kLanes);
  ~CudaVisionLanes();
  DType dtype() const { return dt_; }

  // Device bytes reserve() takes (the ints' pinned host copy not included).
  static int64_t bytes(const ActivationPlan& largest, int64_t rows, const ScratchPerRow& scratch, int64_t ints, DType dt);
  // largest: the plan of a call over `rows` rows (every buffer at its largest).
  void reserve(const ActivationPlan& largest, int64_t rows, const ScratchPerRow& scratch, int64_t ints);
  int64_t rows() const { return rows_; }
  CudaStepInts& ints() { return ints_; }

  // Lane `lane`'s step over `plan` (a call's plan over rows [row0, row0 + T) of the reservation;
  // InternalError when a buffer would leave its part), on s. Valid until the lane's next step().
  CudaStep& step(int lane, const ActivationPlan& plan, int64_t row0, int64_t T, cudaStream_t s);
  int64_t cudnn_calls() const;  // segment attentions that ran through cuDNN (tests)

 private:
  struct Lane {
    cuda::CublasLtGemm gemm;
    CudaVisionCudnn cudnn;
    int64_t epoch = 0;
    CudaScratch scratch{&epoch};
    CudaStep step;
  };
  DType dt_;
  ActivationPlan largest_;
  int64_t rows_ = 0;
  ScratchPerRow scratch_per_row_{};
  std::vector<cuda::DeviceBuffer> bufs_;                 // by plan index, [largest rows, cols]
  std::array<cuda::DeviceBuffer, CudaScratch::kNumSlots> scratch_;  // [rows, bytes per row]
  CudaStepInts ints_;
  std::array<std::unique_ptr<Lane>, kLanes> lanes_;
};

}  // namespace vlm
