// CudaMediaEncoder: a model's media encoder on the GPU for the CudaBackend: picks the runner of
// the model's vision architecture (Model::vision_binding, model/families/vision_binding.h; no
// family class named): LLaVA: CudaLlavaVisionRunner; LLaVA-OneVision: CudaOnevisionVisionRunner;
// Qwen2-VL / Qwen2.5-VL: CudaQwen2VisionRunner; Qwen3-VL: CudaQwen3VLVisionRunner, whose rows
// carry the DeepStack planes beside the merger's; the architectures written once (model/arch)
// over CudaLayers; none for a model whose binding holds none, whose media the ModelRunner encodes
// on the host), reserves its activations for
// max_media_patches encoder rows (before the KV cache is sized, so inside
// --gpu-memory-utilization), refuses items beyond that with a 400 at admission (on a tower that
// splits frames, only items one of whose frames is beyond it), and encodes a step's items into one
// device allocation of their rows (several tower calls when the items together exceed the
// reservation; an item alone beyond it in whole-frame groups of at most the reservation), on the
// decoder's stream. Media of more than step_patches
// patches (a long video) on a tower that splits frames are encoded lazily: in units of whole
// frames of at most step_patches patches, each when DeviceEmbeddings::ensure_rows first asks for
// its rows (the prefill chunk that reads them), so one step's encode is bounded by a unit or two.
// Qwen2-VL items in the Frames8 form (8-bit frames, server/media/qwen2vl_media_loader.h with
// gpu_preprocess) are preprocessed on the GPU as each unit (or eager group) is encoded: only that
// unit's frames are uploaded, a temporal group at a time, into a fixed scratch the reservation
// includes (CudaFramePreprocessor: 48 MiB for Qwen2-VL, in the logged activation bytes).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <span>

#include "kernels/cuda/core/gpu_interval_timer.h"

#include "model/families/model.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm {

class CudaMediaEncoder {
 public:
  // Null when the model's vision architecture has no GPU runner. dt: the decoder's GPU dtype.
  // Throws LoadError when max_media_patches cannot hold one item of the model's smallest kind
  // (LLaVA: one image; OneVision: one tile). step_patches: EngineConfig::media_step_patches
  // (0: never lazy). The model must outlive the encoder.
  static std::unique_ptr<CudaMediaEncoder> make(const Model& model, DType dt, int64_t max_media_patches,
                                                int64_t step_patches);
  CudaMediaEncoder(std::unique_ptr<CudaVisionTower> tower, int64_t step_patches)
      : tower_(std::move(tower)), step_patches_(step_patches), timer_(std::make_shared<cuda::GpuIntervalTimer>()) {}

  // RequestError (400, "messages") when item k alone (a splitting tower: one of its frames)
  // exceeds the reservation.
  void check(const MediaPixels& item, int k) const;
  // items -> [sum out_rows, C] f32 in one new device allocation (C: the tower's out_features, the
  // decoder's width times the model's embedding_planes()), enqueued on s (now, or lazily on
  // ensure_rows; owners keep the items alive as long as the embeddings).
  std::shared_ptr<const DeviceEmbeddings> encode(std::span<const MediaPixels* const> items,
                                                 std::vector<std::shared_ptr<const void>> owners, cudaStream_t s);
  const CudaVisionTower& tower() const { return *tower_; }
  // GPU milliseconds of the tower calls completed since the last call (every call enqueued so far
  // after a sync of the stream): the debug timeline's media-encode share.
  double take_encode_ms() { return timer_->collect(); }

 private:
  std::unique_ptr<CudaVisionTower> tower_;
  int64_t step_patches_ = 0;
  std::shared_ptr<cuda::GpuIntervalTimer> timer_;  // around every tower call (shared with lazy embeddings)
};

}  // namespace vlm
