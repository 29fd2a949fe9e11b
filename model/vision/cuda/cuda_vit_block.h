// One pre-norm ViT block on the GPU, shared by the vision towers (CudaClipVision: CLIP / SigLIP
// encoder layers; CudaQwen2Vision: Qwen2-VL / Qwen2.5-VL blocks): its weights (uploaded once in
// the tower's dtype, norms and the residual-adding biases in f32) and its forward over an f32
// residual stream x [T, Cv]:
//   h = norm1(x); qkv = h Wqkv^T + b; [2-D rotary on q, k]; attn = varlen attention per segment;
//   x += attn Wproj^T + b; h = norm2(x); x += mlp(h)
// where norm is LayerNorm (biases given) or RMSNorm (none), and mlp is fc1 -> activation -> fc2,
// or (gated) [gate; up] -> silu(gate) * up -> down.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/core/tensor.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"

namespace vlm {

// The host tensors of a block (views of the CPU tower's weights). Empty views: absent biases.
// Several parts of qkv / mlp_in are concatenated in order ([Wq; Wk; Wv], [Wgate; Wup]).
struct VitBlockHost {
  TensorView norm1_w, norm1_b, norm2_w, norm2_b;  // [Cv]
  std::vector<TensorView> qkv, qkv_b;             // [3Cv, Cv], [3Cv] in all
  TensorView proj, proj_b;                        // [Cv, Cv], [Cv]
  std::vector<TensorView> mlp_in, mlp_in_b;       // [Iv, Cv] or [2Iv, Cv] in all
  TensorView mlp_out, mlp_out_b;                  // [Cv, Iv], [Cv]
};

struct VitBlockWeights {
  cuda::DeviceBuffer norm1_w, norm1_b, norm2_w, norm2_b;  // [Cv] f32 (biases: LayerNorm)
  cuda::DeviceBuffer qkv, qkv_b;                          // [3Cv, Cv] dt, [3Cv] dt
  cuda::DeviceBuffer proj, proj_b;                        // [Cv, Cv] dt, [Cv] f32
  cuda::DeviceBuffer mlp_in, mlp_in_b;                    // [Iv or 2Iv, Cv] dt, dt
  cuda::DeviceBuffer mlp_out, mlp_out_b;                  // [Cv, Iv] dt, [Cv] f32
};

// Uploads a block's weights as dt (synchronous); adds their bytes to *bytes.
VitBlockWeights upload_vit_block(const VitBlockHost& h, DType dt, int64_t* bytes);

// A block's sizes and variant.
struct VitBlockShape {
  int64_t C = 0, I = 0;  // Cv, Iv
  int H = 0, D = 0;      // heads, head dim (H * D = Cv)
  float eps = 0.0f;      // the norms' epsilon
  bool rms = false;      // RMSNorm (no biases), else LayerNorm
  bool gated = false;    // [gate; up] -> silu * up -> down, else fc1 -> act -> fc2
  cuda::Activation act = cuda::Activation::QuickGelu;  // the ungated MLP's activation
};

// The activations of a call over T rows, all device memory of dt unless said: x [T, C] f32 (the
// residual stream, updated in place), h [T, C], qkv [T, 3C], attn [T, C], f [T, I or 2I], act
// [T, I] (gated only).
struct VitBlockBuffers {
  float* x;
  void *h, *qkv, *attn, *f, *act;
};

class CudaVisionCudnn;

// Attention segments: cu [segments + 1] cumulative row counts (device), the longest segment;
// equal_len > 0 (host): every segment has that many rows, so cudnn (if set, cuda_vision_cudnn.h)
// may run them as one batch; else, or when it declines, varlen_attention runs.
struct VitSegments {
  const int32_t* cu;
  int segments, max_len;
  int equal_len = 0;
  CudaVisionCudnn* cudnn = nullptr;
};

// h [T, C] dt = norm(x [T, C] f32) with weight w and bias b (LayerNorm) or none (RMSNorm).
void vit_norm(const VitBlockShape& shape, const cuda::DeviceBuffer& w, const cuda::DeviceBuffer& b, DType dt,
              int64_t T, const float* x, void* h, cudaStream_t s);

// The block over T rows on s. rope: the [T, D] cos/sin table (vision_rope_table), or null (none).
void vit_block_forward(cuda::CublasLtGemm& gemm, const VitBlockWeights& B, const VitBlockShape& shape, DType dt,
                       int64_t T, const VitBlockBuffers& buf, const VitSegments& seg, const float* rope,
                       cudaStream_t s);

}  // namespace vlm
