// CudaOnevisionVisionRunner: LLaVA-OneVision's vision side on the GPU: LLaVA's SigLIP tower and
// projector (LlavaVision) over an item's tiles or frames, then OnevisionWiring (AnyRes unpad map,
// bilinear shrink, video pooling, image_newline rows), the architectures written once
// (model/arch/onevision_wiring.h) over CudaLayers, as LlavaOnevisionModel runs them over
// CpuLayers. Before it, OneVision media ran on the host CPU of a GPU server.
// Cost (the reservation's unit): tiles: an image's base tile plus its AnyRes tiles, a video's
// frames. One lane; the items of a call run one after the other (each its own layout) into
// consecutive rows of out.
#pragma once

#include <memory>

#include "kernels/cuda/core/cuda_event.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/arch/onevision_wiring.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/vision/cuda/cuda_vision_lanes.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm {

class CudaOnevisionVisionRunner : public CudaVisionTower {
 public:
  // tower: the SigLIP tensors (ClipVisionTower's names under it); projector: "linear_1.*",
  // "linear_2.*"; newline: image_newline [C] in newline_source. Uploads them as dt (F32, BF16 or
  // F16; the newline row stays f32).
  CudaOnevisionVisionRunner(const OnevisionSpec& spec, const WeightSource& tower, const WeightSource& projector,
                            const WeightSource& newline_source, const WeightRef& newline, DType dt);
  ~CudaOnevisionVisionRunner() override;

  // Preconditions: the item passed LlavaOnevisionModel::media_tokens (whole 3 x S x S tiles; an
  // image with its original size and its layout's tile count).
  int64_t cost(const MediaPixels& item) const override;  // its tiles or frames
  int64_t out_rows(const MediaPixels& item) const override;
  int64_t out_features() const override { return spec_.llava.out_features; }
  int64_t workspace_bytes(int64_t max_tiles) const override;
  void reserve(int64_t max_tiles) override;
  void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) override;
  void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;

 private:
  int64_t ints_for(int64_t tiles) const;
  int64_t tile_floats() const { return 3 * spec_.tile_size() * spec_.tile_size(); }

  OnevisionSpec spec_;
  DType dt_;
  CudaLayers layers_;
  std::unique_ptr<LlavaVision> vision_;
  std::unique_ptr<OnevisionWiring> wiring_;
  CudaVisionLanes lanes_;
  cuda::DeviceBuffer pixels_;        // [tiles, 3, S, S] f32
  cuda::CudaEvent meta_done_;  // the last call's metadata copies
};

}  // namespace vlm
