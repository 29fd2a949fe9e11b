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
//
// Data-parallel (issue 42, vLLM's --mm-encoder-tp-mode data; EngineConfig::mm_encoder_devices):
// make() with a list of devices builds one tower per device (CudaVisionDataParallel: weights,
// reservation and a stream on each) and encode() with destinations spreads each tower call's
// units (Qwen2-VL: its groups of whole frames; lazy units likewise, each when first asked for)
// over the devices and delivers every row to each destination (every tensor-parallel rank), the
// same bits as the one-device encoder on a tower that splits frames.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kernels/cuda/core/gpu_interval_timer.h"

#include "model/families/model.h"
#include "model/vision/cuda/cuda_vision_data_parallel.h"
#include "model/vision/cuda/cuda_vision_tower.h"

namespace vlm {

class CudaMediaEncoder {
 public:
  // The tower on the device current at the call (its weights, reservation, streams and events;
  // CudaVisionTower::device()); encode() makes that device current for its work and restores the
  // caller's, and its stream must be one of that device.
  // Null when the model's vision architecture has no GPU runner. dt: the decoder's GPU dtype.
  // Throws LoadError when max_media_patches cannot hold one item of the model's smallest kind
  // (LLaVA: one image; OneVision: one tile). step_patches: EngineConfig::media_step_patches
  // (0: never lazy). The model must outlive the encoder.
  static std::unique_ptr<CudaMediaEncoder> make(const Model& model, DType dt, int64_t max_media_patches,
                                                int64_t step_patches);
  CudaMediaEncoder(std::unique_ptr<CudaVisionTower> tower, int64_t step_patches)
      : tower_(std::move(tower)), step_patches_(step_patches), timer_(std::make_shared<cuda::GpuIntervalTimer>()) {}

  // The data-parallel encoder over `devices` (distinct CUDA ordinals, at least one; one: a single
  // tower whose rows go to several destinations): a tower per device, built and reserved with
  // that device current (so each device's reservation is taken before its KV cache is sized),
  // owned by the encoder (CudaVisionDataParallel); the caller's current device is restored. Null
  // and LoadError as make() above.
  static std::unique_ptr<CudaMediaEncoder> make(const Model& model, DType dt, int64_t max_media_patches,
                                                int64_t step_patches, std::span<const int> devices);
  CudaMediaEncoder(std::unique_ptr<CudaVisionDataParallel> dp, int64_t step_patches)
      : step_patches_(step_patches), timer_(std::make_shared<cuda::GpuIntervalTimer>()), dp_(std::move(dp)),
        dp_mu_(std::make_shared<std::mutex>()) {}

  // RequestError (400, "messages") when item k alone (a splitting tower: one of its frames)
  // exceeds the reservation.
  void check(const MediaPixels& item, int k) const;
  // items -> [sum out_rows, C] f32 in one new device allocation (C: the tower's out_features, the
  // decoder's width times the model's embedding_planes()), enqueued on s (now, or lazily on
  // ensure_rows; owners keep the items alive as long as the embeddings).
  // On a data-parallel encoder: encode(items, owners, {{the current device, s}})[0].
  std::shared_ptr<const DeviceEmbeddings> encode(std::span<const MediaPixels* const> items,
                                                 std::vector<std::shared_ptr<const void>> owners, cudaStream_t s);

  // Where a data-parallel encode delivers rows: a device and a stream of it.
  struct Destination {
    int device = 0;
    cudaStream_t stream = nullptr;
  };
  // Data-parallel encoders only (make() with devices): items -> one DeviceEmbeddings per
  // destination (distinct devices), result[k]'s rows [sum out_rows, C] f32 in a new allocation on
  // dests[k].device, valid in dests[k].stream's order (eager: once this returns; lazy units:
  // once ensure_rows on any of the results returns, which encodes a unit on every device and
  // copies it to every destination, waits enqueued on each destination's stream; thread-safe).
  // The rows equal the one-device encode()'s bit for bit on a tower that splits frames (Qwen2-VL:
  // each device runs whole groups the one-device call would run); whole items elsewhere, to the
  // GEMMs' rounding. The encoder and owners' items must outlive the results.
  std::vector<std::shared_ptr<const DeviceEmbeddings>> encode(std::span<const MediaPixels* const> items,
                                                              std::vector<std::shared_ptr<const void>> owners,
                                                              std::span<const Destination> dests);
  const CudaVisionTower& tower() const { return dp_ ? dp_->tower(0) : *tower_; }
  int num_devices() const { return dp_ ? dp_->size() : 1; }
  CudaVisionDataParallel* data_parallel() { return dp_.get(); }  // null: the one-device encoder
  // GPU milliseconds of the tower calls completed since the last call (every call enqueued so far
  // after a sync of the stream): the debug timeline's media-encode share.
  double take_encode_ms() { return timer_->collect(); }

 private:
  std::unique_ptr<CudaVisionTower> tower_;
  int64_t step_patches_ = 0;
  std::shared_ptr<cuda::GpuIntervalTimer> timer_;  // around every tower call (shared with lazy embeddings)
  std::unique_ptr<CudaVisionDataParallel> dp_;      // the data-parallel towers (tower_ then null)
  std::shared_ptr<std::mutex> dp_mu_;               // around dp_'s calls (lazy rows of several ranks)
};

}  // namespace vlm
