// CudaCudnnPrefill: CudaDecoder's dense prefill attention through cuDNN's fused flash attention
// (kernels/cuda/attention/cudnn_attention.h; 606 / 683 TFLOP/s causal at 8K / 32K on the H200
// against 345 / 369 for paged_prefill_attention, bench/RESULTS.md) for the steps it covers:
// every sequence of the step a first chunk (no cached context: q_len == context_len) of at least
// min_tokens rows, a BF16/F16 model, head size a multiple of 8 up to 128, no sparse prefill. K/V
// then come from the step's contiguous k/v rows (the decoder splits RoPE and the cache write for
// such steps), so no paged read is needed.
//
// Plans are per length bucket (each sequence's q_len rounded up to a multiple of `bucket`), so a
// server builds a bounded number (one per bucket up to its longest first chunk; built on first
// use, logged with the time it took). A sequence padded to its bucket is exact: causal attention
// of row i reads keys <= i only; the padding rows read the next sequence's rows (finite) or the
// zeroed slack rows past the step, and write output rows that the next sequence's call (enqueued
// later on the same stream) or nobody reads. Hence q/k/v/out need slack_rows() rows past T.
//
// Switch: mode -1 reads VLM_CUDA_PREFILL_CUDNN (0 / off / false: never; unset or anything else:
// on), 0 off, 1 on. When cuDNN is missing or a bucket's plan does not build, it warns once and the
// decoder runs its own kernel (covers() turns false / attention() returns false).
#pragma once

#include <cstdint>
#include <memory>
#include <set>

#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cudnn_attention.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/model_config.h"

namespace vlm {

class CudaCudnnPrefill {
 public:
  CudaCudnnPrefill(int mode, int min_tokens, int bucket);
  ~CudaCudnnPrefill();
  bool enabled() const { return enabled_; }
  // Rows past a step's T that q, k, v and out must have (0 when disabled).
  int64_t slack_rows() const { return enabled_ ? bucket_ : 0; }
  // Whether the step qualifies (host arrays of b); loads cuDNN on the first qualifying step.
  bool covers(const ForwardBatch& b, const ModelConfig& c, DType dt);
  // One layer: q [T(+slack), H, D], k/v [T(+slack), Hkv, D] (this step's rows, post-RoPE), out
  // [T(+slack), H, D], all dt. Zeroes k/v's slack rows, then one cuDNN call per sequence. False
  // (after a warning) when cuDNN failed: the caller runs its own kernel for this layer; the
  // failed bucket is not tried again.
  bool attention(const ForwardBatch& b, const void* q, void* k, void* v, void* out, int64_t T, int H, int Hkv, int D,
                 DType dt, float scale, cudaStream_t stream);
  // Layers run through cuDNN so far (tests).
  int64_t calls() const { return calls_; }

 private:
  int padded(int len) const { return (len + bucket_ - 1) / bucket_ * bucket_; }
  bool enabled_;
  int min_tokens_, bucket_;
  std::unique_ptr<cuda::CudnnAttention> att_;
  std::set<int> failed_;  // buckets whose plan did not build
  int64_t calls_ = 0;
};

}  // namespace vlm
