// CudaQwen2VisionRunner: the Qwen2-VL / Qwen2.5-VL vision tower on the GPU as the architecture
// written once (Qwen2VisionTower, model/arch/qwen2_vision_tower.h) over CudaLayers, with the
// call machinery of the hand-written tower it replaced (deleted in issue 39 step 5b after the GPU
// gate showed the same bits): the host layout per call, pixel rows uploaded as f32 (run) or
// group by group of whole frames converted to dt into pinned staging on a copy stream, the groups
// alternating between the caller's stream and a side stream (CudaVisionLanes: lane 0 and 1, each
// its rows of the reservation), Frames8 items' rows made on the GPU (CudaFramePreprocessor).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda/core/cuda_event.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/arch/qwen2_vision_tower.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/vision/cuda/cuda_frame_preprocessor.h"
#include "model/vision/cuda/cuda_vision_lanes.h"
#include "model/vision/cuda/cuda_vision_tower.h"
#include "model/vision/qwen2_vision.h"

namespace vlm {

class CudaQwen2VisionRunner : public CudaVisionTower {
 public:
  // Uploads host's tensors (host.weights()) as dt (F32, BF16 or F16). host must outlive this.
  CudaQwen2VisionRunner(const Qwen2VisionEncoder& host, DType dt);
  ~CudaQwen2VisionRunner() override;

  int64_t cost(const MediaPixels& item) const override;
  int64_t out_rows(const MediaPixels& item) const override;
  int64_t out_features() const override { return host_.config().out_hidden_size; }
  int64_t workspace_bytes(int64_t max_cost) const override;
  void reserve(int64_t max_cost) override;
  void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) override;
  void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;
  // Groups of whole frames (at most group_patches() patches) uploaded
  // while the tower runs the groups already up, on two streams.
  void encode(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;
  bool splits_frames() const override { return true; }
  void encode_frames(std::span<const FrameSlice> slices, float* out, cudaStream_t s) override;
  std::vector<std::vector<FrameSlice>> frame_groups(std::span<const FrameSlice> slices) const override;
  int64_t group_patches() const { return group_patches_; }
  void set_group_patches(int64_t n) { group_patches_ = n; }
  int64_t cudnn_calls() const { return lanes_.cudnn_calls(); }

 private:
  // The tower over items of `grids` whose pixel rows [P, K] of pixel_dt (prompt order) are at
  // pixels, on s in lane `lane` at rows from row0 -> out [P / merge^2, C] f32.
  void run_grids(std::span<const std::array<int32_t, 3>> grids, const void* pixels, DType pixel_dt, float* out,
                 cudaStream_t s, int lane, int64_t row0);
  CudaVisionLanes::ScratchPerRow scratch_per_row() const;
  int64_t ints_for(int64_t patches) const;

  const Qwen2VisionEncoder& host_;
  DType dt_;
  CudaLayers layers_;
  std::unique_ptr<Qwen2VisionTower> tower_;
  CudaVisionLanes lanes_;
  int64_t group_patches_ = 4096;
  cuda::DeviceBuffer pixels_;        // [P, K] f32 (run) or dt (encode)
  cuda::CudaEvent meta_done_;  // the last call's metadata copies (the pinned ints are free after it)
  cudaStream_t copy_ = nullptr;      // encode()'s pixel uploads
  cudaStream_t side_ = nullptr;      // encode()'s odd groups
  cuda::CudaEvent side_done_;
  cuda::CudaEvent tower_free_, uploaded_;
  cuda::CudaEvent staged_;  // encode()'s last copy out of staging_
  cuda::PinnedBuffer staging_;    // encode()'s pixels as dt [P, K] (pinned host)
  CudaFramePreprocessor frames_;  // Frames8 items' rows, on copy_
};

}  // namespace vlm
