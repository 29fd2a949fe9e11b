// CudaStep: one forward call on the GPU as the CUDA layers see it. The runner (CudaDecoder) fills
// it for each step: the stream and compute dtype, the step's device metadata (one upload, or a
// decode graph's fixed buffer), the plan's activations in its arena, the logits buffer, scratch
// that grows between steps (never while a graph is captured: a bucket's first step runs eagerly
// and sizes it), and the attention runner that owns the paged cache and the methods.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
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
// still read the old buffer) and bumps *epoch (decode graphs hold the old pointers).
class CudaScratch {
 public:
  enum Slot { kNormOut, kGateUp, kAct, kRopeTable, kNumSlots };
  explicit CudaScratch(int64_t* epoch) : epoch_(epoch) {}
  void* get(Slot slot, int64_t bytes, cudaStream_t s);

 private:
  int64_t* epoch_;
  cuda::DeviceBuffer bufs_[kNumSlots];
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
  bool fused_norm = true;  // fold a pre-norm into the GEMV on steps of few rows (gemv_norm.h)
  std::vector<Act> acts;   // the plan's buffers
  float* logits_buf = nullptr;  // [R, V]
  cuda::CublasLtGemm* gemm = nullptr;
  StepProfiler* prof = nullptr;
  CudaScratch* pool = nullptr;
  CudaAttentionRunner* attention = nullptr;

  void mark(const char* what) const;  // the profiler's mark after an op (a no-op unless profiling)
};

}  // namespace vlm
