// CudaStep: one forward call on the GPU as the CUDA layers see it. The runner (CudaDecoder) fills
// it for each step: the stream and compute dtype, the step's device metadata (one upload, or a
// decode graph's fixed buffer), the plan's activations in its arena, the logits buffer, scratch
// that grows between steps (never while a graph is captured: a bucket's first step runs eagerly
// and sizes it), and the attention runner that owns the paged cache and the methods.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "model/decoder/embedding_override.h"
#include "model/decoder/forward_batch.h"
#include "model/layers/layers.h"

namespace vlm {

class StepProfiler;
class CudaVisionCudnn;

// The attention of one decoder layer over the paged cache with the step's methods (cuDNN,
// sparse prefill, SinkRouter, LOOK-M, probes): rotates q/k of the fused projection, writes K/V
// into layer `layer`'s cache slots, and returns the attention [T, H*D] (dt) in its own memory.
// With `norm` (q_w non-null) the q and k heads are RMS-normalized first (Qwen3; in place or fused
// into the rotation, the same bits).
class CudaAttentionRunner {
 public:
  virtual ~CudaAttentionRunner() = default;
  virtual Act attend(int layer, Act qkv /*[T,(H+2Hkv)D]*/, const RopeRows& rope, const cuda::HeadNorm& norm) = 0;
};

// Device scratch by slot, grown on demand: growing waits for the stream (a previous step may
// still read the old buffer) and bumps *epoch (decode graphs hold the old pointers). A slot may
// instead be given fixed memory (assign: a vision call's share of its reserved workspace, so
// that encoding never allocates); asking it for more is an InternalError.
class CudaScratch {
 public:
  // kMediaPlanes: a DeepStack step's media rows with all their planes, and their batch rows.
  // kFp8Act / kFp8Scale / kFp8Out: an FP8 linear layer's quantized activations, their per-token scales, its f32 output.
  enum Slot {
    kNormOut, kGateUp, kAct, kRopeTable, kPatches, kPatchOut, kMediaPlanes, kFp8Act, kFp8Scale, kFp8Out, kNumSlots
  };
  explicit CudaScratch(int64_t* epoch) : epoch_(epoch) {}
  void* get(Slot slot, int64_t bytes, cudaStream_t s);
  void assign(Slot slot, void* p, int64_t bytes);

 private:
  int64_t* epoch_;
  cuda::DeviceBuffer bufs_[kNumSlots];
  void* fixed_[kNumSlots] = {};
  int64_t fixed_bytes_[kNumSlots] = {};
};

// Host int arrays a vision call's layers need on the device (segment bounds, gather orders,
// 2-D positions): each written as int32 into pinned memory and copied once (async, on the
// step's stream); asking again for the same array (host pointer, length, tag) within a step
// returns the same device copy. Memory is reserved up front (reserve) and used from the front;
// the owner calls reset() only once the copies of every earlier call have left the pinned memory
// (it waits on its own event), and new_step() between steps of one call (whose host arrays may
// reuse freed addresses).
class CudaStepInts {
 public:
  void reserve(int64_t ints);
  int64_t capacity() const { return cap_; }
  void reset() {
    used_ = 0;
    new_step();
  }
  void new_step() { cache_.clear(); }
  // n ints made by fill(host) (host: n ints of pinned memory) -> their device copy.
  const int32_t* get(const void* key, int64_t tag, int64_t n, const std::function<void(int32_t*)>& fill,
                     cudaStream_t s);

 private:
  struct Entry {
    const void* key;
    int64_t tag, n;
    const int32_t* dev;
  };
  cuda::PinnedBuffer host_;
  cuda::DeviceBuffer dev_;
  int64_t cap_ = 0, used_ = 0;
  std::vector<Entry> cache_;
};

class CudaStep final : public Step {
 public:
  int64_t num_tokens() const override { return T; }
  int64_t num_logit_rows() const override { return R; }
  Act act(int i) override { return acts.at(static_cast<size_t>(i)); }
  Act logits(int64_t vocab) override { return Act{logits_buf, R, vocab, DType::F32}; }
  void* scratch(CudaScratch::Slot slot, int64_t bytes) { return pool->get(slot, bytes, stream); }
  // A layer's view of the step it was given (InternalError when another backend made it).
  static CudaStep& of(Step& s);

  cudaStream_t stream = nullptr;
  DType dt = DType::BF16;     // weights, Hidden activations, the KV cache
  int64_t T = 0, R = 0;
  const ForwardBatch* batch = nullptr;
  const EmbeddingOverride* override = nullptr;
  // Device metadata: ids [T], positions [T], M-RoPE positions [T, 3] (or null), logit rows [R].
  const int32_t* ids = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* mrope = nullptr;
  const int32_t* rows = nullptr;
  // DeepStack (Qwen3-VL; num_planes > 1): the step's media rows with every plane, on the device
  // once per step (the embedding puts them there, scratch kMediaPlanes), media_planes
  // [num_media_rows, num_planes * C] f32 and their batch rows media_rows [num_media_rows];
  // RowOps::add_override_plane adds plane p from there. 0 rows: none this step (decode steps).
  const float* media_planes = nullptr;
  const int32_t* media_rows = nullptr;
  int64_t num_media_rows = 0, num_planes = 1;
  bool fused_norm = true;  // fold a pre-norm into the GEMV on steps of few rows (gemv_norm.h)
  // GEMVs for steps of few 16-bit rows (the decoder's); a vision call sets false: its layers
  // run cuBLASLt GEMMs whatever the rows, as the towers before the layers did.
  bool gemv = true;
  // Vision calls: equal segments through cuDNN (cuda_vision_cudnn.h; null: varlen_attention
  // always), and the device copies of the call's host int arrays (the vision layers need it).
  CudaVisionCudnn* cudnn = nullptr;
  CudaStepInts* ints = nullptr;
  std::vector<Act> acts;   // the plan's buffers
  float* logits_buf = nullptr;  // [R, V]
  cuda::CublasLtGemm* gemm = nullptr;
  StepProfiler* prof = nullptr;
  CudaScratch* pool = nullptr;
  CudaAttentionRunner* attention = nullptr;

  void mark(const char* what) const;  // the profiler's mark after an op (a no-op unless profiling)
};

}  // namespace vlm
