// CudaVisionTower: a vision encoder (tower + projector / merger) on one GPU, the twin of the CPU
// encoders of model/vision: CudaLlavaVisionRunner (LLaVA: CLIP / SigLIP ViT, the MLP projector),
// CudaQwen2VisionRunner (the Qwen2-VL / Qwen2.5-VL ViT with its merger) and
// CudaQwen3VLVisionRunner (Qwen3-VL: rows of the merger's and the DeepStack planes side by side,
// out_features (1 + K) C), the architectures of model/arch over CudaLayers. Weights are copied to the GPU
// in the decoder's dtype (F32: the exact path, f32 GEMMs without TF32; BF16 / F16: tensor cores);
// the residual stream stays f32 and the output rows are f32, written where the caller says (the
// decoder's input embeddings take them without a host round trip).
//
// Memory: every activation buffer is sized once, by reserve(max_cost), for calls whose items
// cost (encoder rows: patches, or image tokens) at most max_cost in all; encode() never allocates
// (the owner calls it before sizing the KV cache, so the reservation sits inside
// --gpu-memory-utilization). workspace_bytes() states the plan.
//
// Devices: a tower lives on the device current when it is constructed (its weights, buffers,
// streams and events are made there; device()). Every entry that touches the GPU (reserve,
// upload_pixels, run, encode, encode_frames) makes that device current for the call and
// restores the caller's (cuda::CudaDeviceGuard), so a caller on another device (a tensor-parallel
// engine's thread, whose current device its ranks move) still runs it right; the stream passed
// must be one of the tower's device. The destructor frees on it too (teardown_on_device).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/core/cuda_device_guard.h"
#include "model/media/media_pixels.h"

namespace vlm {

// Frames [t0, t1) of an item: of its grid_thw[0] temporal patch groups (an image: [0, 1)).
struct FrameSlice {
  const MediaPixels* item;
  int32_t t0, t1;
};

// The item's frames (temporal patch groups; 1 for an image without a grid).
inline int32_t item_frames(const MediaPixels& m) { return m.grid_thw[0] > 0 ? m.grid_thw[0] : 1; }

class CudaVisionTower {
 public:
  // The current device (-1 where none can be had: a plan-only tower of the CPU tests).
  CudaVisionTower() : device_(cuda::current_device_or_none()) {}
  virtual ~CudaVisionTower() = default;
  CudaVisionTower(const CudaVisionTower&) = delete;
  CudaVisionTower& operator=(const CudaVisionTower&) = delete;
  int device() const { return device_; }  // the CUDA device it lives on
  // Encoder rows of an item (its share of the reservation). Preconditions: the item passed the
  // model's media_tokens() check.
  virtual int64_t cost(const MediaPixels& item) const = 0;
  virtual int64_t out_rows(const MediaPixels& item) const = 0;  // the item's prompt tokens
  virtual int64_t out_features() const = 0;                     // C, the decoder's hidden size
  int64_t weight_bytes() const { return weight_bytes_; }
  virtual int64_t workspace_bytes(int64_t max_cost) const = 0;  // what reserve(max_cost) takes
  virtual void reserve(int64_t max_cost) = 0;
  int64_t reserved_cost() const { return reserved_; }

  // items (total cost <= reserved_cost()) -> out [sum out_rows, C] f32 (device), item after item;
  // enqueued on s (the host's pixels are read before it returns): upload_pixels() then run(), or
  // the two overlapped.
  virtual void encode(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
    const cuda::CudaDeviceGuard on(device_);
    upload_pixels(items, s);
    run(items, out, s);
  }
  // The two halves of encode(): the items' pixels into the reserved buffer (once; pageable
  // copies), then the tower over them (the benchmark times run() alone as well: the peer's
  // pixel_values are on the GPU already).
  virtual void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) = 0;
  virtual void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) = 0;

  // Whether encode_frames() takes parts of items (Qwen2-VL: frames are independent until the
  // merger's rows), else whole items only.
  virtual bool splits_frames() const { return false; }
  // slices (total cost <= reserved_cost()) -> out [their rows, C] f32, slice after slice; a
  // slice's rows are its frames' share of the item's (out_rows / item_frames each). The default
  // takes whole items to encode().
  virtual void encode_frames(std::span<const FrameSlice> slices, float* out, cudaStream_t s);
  // The units a data-parallel encoder (CudaVisionDataParallel) may hand to different devices, in
  // order, each a list of slices (the units' slices concatenated are `slices`' frames in order).
  // A tower that splits frames: the groups encode_frames(slices) runs as separate tower passes
  // (Qwen2-VL: whole frames of at most group_patches()), and encode_frames() of the slices of a
  // run of consecutive groups makes exactly those groups again, so their rows have the same bits
  // as in the one call. The default (whole items): one unit per slice; a unit's rows then equal
  // the batched call's to the GEMMs' rounding, not bit for bit (the batch's row count differs).
  virtual std::vector<std::vector<FrameSlice>> frame_groups(std::span<const FrameSlice> slices) const;

 protected:
  // A derived destructor's first statement: the tower's device stays current until this base is
  // destroyed (after the derived members: their streams, events and buffers go on their device),
  // then the caller's is restored.
  void teardown_on_device() {
    teardown_.mark();
    cudaSetDevice(device_);
  }

  const int device_;
  int64_t reserved_ = 0;
  int64_t weight_bytes_ = 0;  // of the weights uploaded

 private:
  cuda::DeviceRestorePoint teardown_;  // the caller's device, back after the derived members (teardown_on_device)
};

}  // namespace vlm

namespace vlm {

// Throws RequestError (400, param "messages") naming the sizes when item k costs more than the
// tower's reservation (its activations would not fit the memory planned for the encoder); on a
// tower that splits frames, when one of its frames (temporal patch groups) does: the encoder then
// takes a longer item in whole-frame groups.
void check_vision_fits(const CudaVisionTower& tower, const MediaPixels& item, int k);

}  // namespace vlm
