// CudaVisionCudnn: the vision towers' bidirectional segment attention through cuDNN's fused flash
// attention (kernels/cuda/attention/cudnn_attention.h) where every segment of a call has the same
// length (Qwen2-VL video: each temporal group is one segment of h * w patches): batch = number of
// segments, seq_q = seq_kv = the segment length, no mask, q/k/v read in place from the fused
// projection [T, 3, H, D] (row stride 3 H D), out [T, H, D]. Head dims a multiple of 8 up to 128
// (Qwen2-VL's 80 included), BF16/F16 only. Anything else (unequal segments, F32, a plan that does
// not build or run) returns false and the caller runs varlen_attention (varlen_attention.h).
//
// One plan per (segments, segment length, H, D), built on first use (~0.1 s, logged) and cached
// with its workspace: a server sees one per video resolution and frame count per group. Switch:
// mode -1 reads VLM_CUDA_VISION_CUDNN (0 / off / false: never; unset or anything else: on), 0 off,
// 1 on. cuDNN missing: warned once, then off. One instance per stream (the plans' workspaces are
// not shared between concurrent calls).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <tuple>

#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cudnn_attention.h"

namespace vlm {

class CudaVisionCudnn {
 public:
  explicit CudaVisionCudnn(int mode = -1);
  ~CudaVisionCudnn();
  bool enabled() const { return enabled_; }
  // out [segments * seg_len, H, D] = softmax(q kᵀ * scale) v per segment, q/k/v rows row_stride
  // elements apart (q, k, v: device pointers into the fused projection). False (nothing written
  // that the caller relies on) when not covered or cuDNN failed: run the built-in kernel.
  bool attention(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int H, int D,
                 int segments, int seg_len, float scale, void* out, cudaStream_t stream);
  int64_t calls() const { return calls_; }  // attention() calls that ran through cuDNN (tests)

 private:
  bool enabled_;
  std::unique_ptr<cuda::CudnnAttention> att_;
  std::set<cuda::CudnnAttentionShape> failed_;
  int64_t calls_ = 0;
};

}  // namespace vlm
