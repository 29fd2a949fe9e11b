// CudaQwen3VLVisionRunner: the Qwen3-VL vision tower on the GPU as the architecture written once
// (Qwen3VLVisionTower, model/arch/qwen3_vl_vision_tower.h) over CudaLayers: the merger plane and
// the K DeepStack planes of each merged unit. One lane; pixel rows uploaded in the tower's dtype
// (the patch linear reads them as its input; converted on the host); items run
// together in one call (attention within each frame). The tower writes its planes one after the
// other ([(1 + K) U, C], into the runner's own buffer); the output rows carry them side by side
// ([U, (1 + K) C], what Qwen3VLModel::encode gives and the decoder's embedding override takes:
// EmbeddingOverride::num_planes = 1 + K), one strided copy per plane. Items in the Frames8 form
// (8-bit frames; server/media/qwen3vl_media_loader.h with gpu_preprocess) get their rows made on
// the GPU by CudaFramePreprocessor straight into the pixel buffer in the tower's dtype (patch 16,
// mean/std 0.5, the item's resize target: bit-identical to the Rows form's rows converted on the
// host, tests/model/vision/cuda/test_cuda_qwen3vl_frames8.cpp).
//
// Memory: reserve(P) sizes every buffer for calls of at most P patches in all, plus the frame
// preprocessor's fixed scratch (CudaFramePreprocessor::workspace_bytes(tp)); an item beyond it
// is refused at admission (check_vision_fits: this runner takes whole items, splits_frames()
// false, so a long video takes one call; the engine already splits a video into its temporal
// groups, Qwen3VLModel::split_video).
#pragma once

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cuda/core/cuda_event.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/arch/qwen3_vl_vision_tower.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/vision/cuda/cuda_frame_preprocessor.h"
#include "model/vision/cuda/cuda_vision_lanes.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm {

class CudaQwen3VLVisionRunner : public CudaVisionTower {
 public:
  // weights: the tower's tensors (Qwen3VLModel::vision_weights()), uploaded as dt (F32, BF16 or
  // F16). Throws LoadError naming a missing tensor.
  CudaQwen3VLVisionRunner(const Qwen3VLVisionConfig& config, const WeightSource& weights, DType dt);
  ~CudaQwen3VLVisionRunner() override;

  int64_t cost(const MediaPixels& item) const override;      // t * h * w patches
  int64_t out_rows(const MediaPixels& item) const override;  // its merged units
  int64_t out_features() const override { return planes() * config_.out_hidden_size; }  // (1 + K) C
  int64_t planes() const { return 1 + config_.num_deepstack(); }
  int64_t workspace_bytes(int64_t max_patches) const override;
  void reserve(int64_t max_patches) override;
  // items (Rows form: [t*h*w, patch_dim] f32 each, converted on the host; Frames8: rows made on
  // the GPU, on s) -> the reserved pixel buffer [P, patch_dim], as dt.
  void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) override;
  // -> out [sum U, (1 + K) C] f32 (device).
  void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;
  int64_t cudnn_calls() const { return lanes_.cudnn_calls(); }

 private:
  CudaVisionLanes::ScratchPerRow scratch_per_row() const;
  int64_t ints_for(int64_t patches) const;

  Qwen3VLVisionConfig config_;
  DType dt_;
  CudaLayers layers_;
  std::unique_ptr<Qwen3VLVisionTower> tower_;
  CudaVisionLanes lanes_;
  cuda::DeviceBuffer pixels_;        // [P, patch_dim] dt
  std::vector<char> staging_;        // one item's pixels as dt (pageable; 16-bit dtypes)
  cuda::DeviceBuffer stacked_;       // [(1 + K) U, C] f32: the tower's planes one after the other
  cuda::CudaEvent meta_done_;  // the last call's metadata copies (the pinned ints are free after it)
  CudaFramePreprocessor frames_;     // Frames8 items' rows, on the caller's stream
};

}  // namespace vlm
