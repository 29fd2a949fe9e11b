// The Qwen2-VL / Qwen2.5-VL vision tower on the GPU (the CPU twin: model/vision/qwen2_vision.h).
// Per call: the host layout (Qwen2VisionEncoder::layout: run order, frame and window segments,
// 2-D positions) goes up in one pinned copy; pixel rows are gathered into the run order and
// converted to dt, then
//   patch embed: the Conv3d as one GEMM [P, K] x [Cv, K]^T -> x (f32 residual stream);
//   2-D rotary:  the [P, D] cos/sin table built on the GPU from the positions;
//   blocks:      norm1 (LayerNorm / RMSNorm) -> fused qkv GEMM -> rotary on q, k in place ->
//                varlen attention of every frame (full) or window (Qwen2.5-VL) in one launch ->
//                proj GEMM adding into x; norm2 -> fc1 -> quick_gelu -> fc2 (Qwen2-VL) or the
//                fused [gate; up] GEMM -> silu * up -> down (Qwen2.5-VL), adding into x;
//   merger:      norm, 2x2 units as rows of 4 Cv, Linear -> GELU -> Linear (f32 out), rows
//                scattered back to the prompt order straight into the caller's output.
// Items in the Frames8 form (model/media/media_pixels.h: 8-bit frames) get their rows made on the
// GPU (CudaFramePreprocessor, on the copy stream, into the same rows the f32 upload fills), group
// by group: only the frames being encoded are uploaded. The workspace includes its scratch.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "model/vision/cuda/cuda_frame_preprocessor.h"
#include "model/vision/cuda/cuda_vision_cudnn.h"
#include "model/vision/cuda/cuda_vision_tower.h"
#include "model/vision/cuda/cuda_vit_block.h"
#include "model/vision/qwen2_vision.h"

namespace vlm {

// Bytes of the activations of a call over `patches` patches (the plan CudaQwen2Vision reserves;
// its workspace_bytes() adds the GPU frame preprocessing's fixed scratch,
// CudaFramePreprocessor::workspace_bytes).
int64_t qwen2_vision_workspace_bytes(const Qwen2VisionConfig& c, int64_t patches, DType dt);

class CudaQwen2Vision : public CudaVisionTower {
 public:
  // Uploads host's weights as dt (F32, BF16 or F16). host must outlive this.
  CudaQwen2Vision(const Qwen2VisionEncoder& host, DType dt);
  ~CudaQwen2Vision() override;

  int64_t cost(const MediaPixels& item) const override;
  int64_t out_rows(const MediaPixels& item) const override;
  int64_t out_features() const override { return host_.config().out_hidden_size; }
  int64_t workspace_bytes(int64_t max_cost) const override;
  void reserve(int64_t max_cost) override;
  void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) override;
  void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;
  // The items' pixels uploaded group by group (whole frames, at most group_patches() patches a
  // group; converted to dt into pinned staging, async copies on a copy stream) while the tower
  // runs each group as its pixels arrive: the frames of a video are independent until the
  // merger's output, so the rows equal one run() over them all.
  void encode(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;
  bool splits_frames() const override { return true; }
  void encode_frames(std::span<const FrameSlice> slices, float* out, cudaStream_t s) override;
  int64_t group_patches() const { return group_patches_; }
  // Segment attentions that ran through cuDNN (cuda_vision_cudnn.h; tests).
  int64_t cudnn_calls() const { return cudnn_.calls() + side_cudnn_.calls(); }
  void set_group_patches(int64_t n) { group_patches_ = n; }

 private:
  // Where a tower call works: its first row of the workspace (patches), its first int of the
  // metadata buffers, the GEMM object of its stream.
  struct Lane {
    int64_t row0, meta0;
    cuda::CublasLtGemm* gemm;
    CudaVisionCudnn* cudnn;  // equal segments through cuDNN (cuda_vision_cudnn.h), one per stream
  };
  // The tower over items of `grids` whose pixel rows [P, K] of pixel_dt (prompt order) are at
  // pixels, on s in the lane's rows; returns the metadata ints it used. The caller has waited
  // until the lane's part of meta_host_ is free.
  int64_t run_grids(std::span<const std::array<int32_t, 3>> grids, const void* pixels, DType pixel_dt, float* out,
                    cudaStream_t s, const Lane& lane);

  const Qwen2VisionEncoder& host_;
  DType dt_;
  cuda::CublasLtGemm gemm_, side_gemm_;  // side_gemm_: side_'s (its own cuBLASLt workspace)
  CudaVisionCudnn cudnn_, side_cudnn_;   // likewise (their own plans' workspaces)
  std::vector<VitBlockWeights> blocks_;
  int64_t group_patches_ = 4096;
  cuda::DeviceBuffer patch_w_, inv_freq_;
  cuda::DeviceBuffer mnorm_w_, mnorm_b_, mlp0_, mlp0_b_, mlp2_, mlp2_b_;
  // Workspace (reserve()).
  cuda::PinnedBuffer meta_host_;
  cuda::DeviceBuffer meta_dev_, pixels_, patches_, x_, h_, qkv_, attn_, f_, act_, table_, m1_, m2_;
  cudaEvent_t meta_done_ = nullptr;  // the last metadata upload (meta_host_ is free after it)
  cudaStream_t copy_ = nullptr;      // encode()'s pixel uploads
  cudaStream_t side_ = nullptr;      // encode()'s odd groups
  cudaEvent_t side_done_ = nullptr;
  cudaEvent_t tower_free_ = nullptr, uploaded_ = nullptr;
  cudaEvent_t staged_ = nullptr;      // encode()'s last copy out of staging_
  cuda::PinnedBuffer staging_;        // encode()'s pixels as dt [P, K] (pinned host)
  CudaFramePreprocessor frames_;      // Frames8 items' rows, on copy_
};

}  // namespace vlm
