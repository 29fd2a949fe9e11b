// LLaVA's vision side on the GPU (the CPU twins: ClipVisionEncoder, LlavaProjector): the stride-p
// patch conv as unfold + one GEMM, class token and positions, pre-LayerNorm (CLIP), the pre-LN
// encoder layers up to the deepest selected hidden state (fused qkv GEMM, one varlen attention
// launch over all images of the call, fc1 -> activation -> fc2, residual adds in the GEMMs over
// an f32 stream), the selected hidden states (class row dropped for the "default" strategy)
// gathered side by side as the projector's input, then linear_1 -> GELU -> linear_2 (f32 out).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "model/vision/clip_vision.h"
#include "model/vision/cuda/cuda_vision_cudnn.h"
#include "model/vision/cuda/cuda_vision_tower.h"
#include "model/vision/cuda/cuda_vit_block.h"
#include "model/vision/projector.h"

namespace vlm {

// Bytes of the activations of a call over `images` images (the plan CudaClipVision reserves).
int64_t clip_vision_workspace_bytes(const ClipVisionConfig& c, int64_t num_features, int64_t out_features,
                                    int64_t images, bool drop_cls, DType dt);

class CudaClipVision : public CudaVisionTower {
 public:
  // feature_layers: the hidden states to concatenate (indices in [0, layers loaded]); host and
  // projector must outlive this.
  CudaClipVision(const ClipVisionEncoder& host, const LlavaProjector& projector, std::vector<int> feature_layers,
                 bool drop_cls, DType dt);
  ~CudaClipVision() override;

  int64_t cost(const MediaPixels&) const override { return 1; }  // one image
  int64_t out_rows(const MediaPixels&) const override { return rows_; }
  int64_t out_features() const override { return projector_.out_features(); }
  int64_t workspace_bytes(int64_t max_images) const override;
  void reserve(int64_t max_images) override;
  void upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) override;
  void run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) override;

 private:
  void emit(int hidden_index, int64_t N, cudaStream_t s);

  const ClipVisionEncoder& host_;
  const LlavaProjector& projector_;
  std::vector<int> feature_layers_;
  bool drop_cls_;
  int64_t rows_;  // tokens per image
  DType dt_;
  cuda::CublasLtGemm gemm_;
  CudaVisionCudnn cudnn_;  // the images' attention through cuDNN where it covers them (cuda_vision_cudnn.h)
  std::vector<VitBlockWeights> layers_;
  cuda::DeviceBuffer patch_w_, patch_b_, class_emb_, pos_emb_, pre_ln_w_, pre_ln_b_;
  cuda::DeviceBuffer w1_, b1_, w2_, b2_;
  cuda::PinnedBuffer meta_host_;
  cuda::DeviceBuffer meta_dev_, pixels_, patches_, pe_, x_, h_, qkv_, attn_, f_, feats_, p1_;
};

}  // namespace vlm
