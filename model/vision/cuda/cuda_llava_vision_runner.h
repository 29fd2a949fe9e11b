// CudaLlavaVisionRunner: LLaVA's vision side on the GPU (CLIP / SigLIP tower up to the deepest
// selected hidden state, the selected states side by side, the projector) as the architecture
// written once (LlavaVision, model/arch/llava_wiring.h) over CudaLayers. It replaced the
// hand-written GPU tower (deleted in issue 39 step 5b after the GPU gate showed the same bits).
// One lane: the images of a call run together (one segment attention over all of them).
#pragma once

#include <memory>

#include "kernels/cuda/core/cuda_event.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/arch/llava_wiring.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/vision/cuda/cuda_vision_lanes.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm {

class CudaLlavaVisionRunner : public CudaVisionTower {
 public:
  // tower: the CLIP / SigLIP tensors (ClipVisionTower's names under it); projector: "linear_1.*",
  // "linear_2.*". Uploads them as dt (F32, BF16 or F16).
  CudaLlavaVisionRunner(const LlavaVisionSpec& spec, const WeightSource& tower, const WeightSource& projector, DType dt);
  ~CudaLlavaVisionRunner() override;

  int64_t cost(const MediaPixels&) const override { return 1; }  // one image
  int64_t out_rows(const MediaPixels&) const override { return wiring_->spec().tokens_per_image(); }
  int64_t out_features() const override { return wiring_->spec().out_features; }
  int64_t workspace_bytes(int64_t max_images) const override;
  void reserve(int64_t max_images) override;
  void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) override;
  void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;
  int64_t cudnn_calls() const { return lanes_.cudnn_calls(); }
  // Scratch per image of a CLIP / SigLIP tower in dt (also a OneVision tile's): the norm before a
  // linear layer or an MLP [L, C] dt, the unfolded patches [P, K] dt, the conv's output [P, C] f32.
  static CudaVisionLanes::ScratchPerRow scratch_per_image(const ClipVisionConfig& c, DType dt);

 private:
  int64_t ints_for(int64_t images) const;

  DType dt_;
  CudaLayers layers_;
  std::unique_ptr<LlavaVision> wiring_;
  CudaVisionLanes lanes_;
  cuda::DeviceBuffer pixels_;        // [N, 3, S, S] f32
  cuda::CudaEvent meta_done_;  // the last call's metadata copies
};

}  // namespace vlm
