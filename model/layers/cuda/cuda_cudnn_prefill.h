// CudaCudnnPrefill: CudaDecoder's dense prefill attention through cuDNN's fused flash attention
// (kernels/cuda/attention/cudnn_attention.h; 606 / 683 TFLOP/s causal at 8K / 32K on the H200
// against 345 / 369 for paged_prefill_attention, bench/RESULTS.md) for a BF16/F16 model with head
// size a multiple of 8 up to 128 and no sparse prefill (MMInference steps keep their kernel).
// Two kinds of step (plan_step):
//  - kFirstChunks: every sequence a first chunk (no cached context: q_len == context_len) of at
//    least min_tokens rows. K/V come from the step's contiguous k/v rows (the decoder splits RoPE
//    and the cache write for such steps: uses_kv_rows()), so no paged read is needed.
//  - kPaged: any other step with a sequence of at least min_tokens query rows (a chunk over
//    cached context, first chunks beside decode rows, ...). Per covered sequence and layer, its
//    context_len cached K/V rows are gathered through the block table (paged_kv_gather.h) into
//    a contiguous scratch [ctx, Hkv, D] (K and V), then one cuDNN call with seq_q = q_len,
//    seq_kv = context_len, causal bottom-right aligned. The other sequences (decode rows, short
//    chunks, contexts past the scratch) run the caller's kernel afterwards, per contiguous range
//    of sequences (a CudaAttentionBatch pointing into the step's metadata), so they also
//    overwrite any padding rows a cuDNN call wrote into their output rows.
//
// Plans are per length bucket: q_len rounded up to a multiple of `bucket`; in kPaged mode one kv
// length for every context, the scratch's (padded keys cost nothing: on the H200 a 2,048-row
// chunk over 8K / 32K / 98K keys took the same time in a plan of 131,072 keys as in an exact one,
// bench_cuda_attention chunks, bench/RESULTS.md), so a long prompt builds one or two plans (~80 ms
// each, once per process). VLM_CUDA_PREFILL_CUDNN_KV_BUCKETS=N: N kv lengths per octave instead
// (multiples of max(bucket, 2^(floor(log2(ctx)) + 1) / N)). Padding is exact: the real lengths
// reach cuDNN at run time (CudnnAttention::run_padded: GEMM bounds, padding mask, bottom-right
// causal offset), so real query row i sees keys [0, ctx - q_len + i] and never a padded key;
// padding query rows read the next rows of q (finite, or slack) and write output rows that later
// calls overwrite or nobody reads. Hence q and out need slack_rows() rows past T.
//
// Memory: reserve() allocates the scratch once, 2 * padded_kv(max_model_len) * Hkv * D
// * sizeof(dt) bytes (256 MiB for Qwen2-7B's 4 KV heads of 128 at 128K tokens, bf16), called
// from CudaDecoder::reserve_activations before the KV cache is sized, so it counts in the memory
// plan; when that allocation fails kPaged is off (warned) and contexts past the scratch fall back.
//
// kPaged is on by default; VLM_CUDA_PREFILL_CUDNN_CHUNKS=0 turns it off (first chunks stay on).
// (Session 11's version passed the real lengths as by-value scalars, which the engine ignored:
// its padded shapes failed the reference tests on the H200 and it shipped off.)
//
// Switch: mode -1 reads VLM_CUDA_PREFILL_CUDNN (0 / off / false: never, both kinds; unset or
// anything else: on), 0 off, 1 on. When cuDNN is missing or a bucket's plan does not build or
// run, it warns once and the decoder runs its own kernel (plan_step returns kNone / attention()
// returns false); the failed bucket is not tried again. No cuDNN call is made for all-decode
// steps (min_tokens >= 2), so CUDA graph capture (decode steps only) never reaches cuDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <tuple>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cudnn_attention.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/model_config.h"

namespace vlm {

// VLM_CUDA_PREFILL_CUDNN_CHUNKS is not 0 / off / false: kPaged steps allowed (on by default).
bool cudnn_paged_prefill_enabled();

class CudaCudnnPrefill {
 public:
  enum Mode { kNone = 0, kFirstChunks = 1, kPaged = 2 };
  // The caller's own attention for a range of the step's sequences (metadata pointing into the
  // step's, absolute row offsets); in kPaged steps it runs after the cuDNN calls.
  // A non-owning reference to a callable (no allocation per layer; valid during the call).
  class Builtin {
   public:
    template <class F>
    Builtin(const F& f)  // NOLINT(google-explicit-constructor): lambdas pass straight in
        : obj_(&f), call_([](const void* o, const cuda::CudaAttentionBatch& m) { (*static_cast<const F*>(o))(m); }) {}
    void operator()(const cuda::CudaAttentionBatch& m) const { call_(obj_, m); }

   private:
    const void* obj_;
    void (*call_)(const void*, const cuda::CudaAttentionBatch&);
  };

  CudaCudnnPrefill(int mode, int min_tokens, int bucket);
  ~CudaCudnnPrefill();
  bool enabled() const { return enabled_; }
  // Rows past a step's T that q, k, v and out must have (0 when disabled).
  int64_t slack_rows() const { return enabled_ ? bucket_ : 0; }
  // Allocates the kPaged scratch (once; see Memory above) for contexts up to max_model_len tokens
  // (<= 0: c.max_position_embeddings); nothing for a model plan_step never covers. Loads cuDNN
  // first (when absent: warned, switched off, no scratch). Returns slack_rows().
  int64_t reserve(const ModelConfig& c, int64_t max_model_len, DType dt);
  int64_t context_bytes() const { return scratch_bytes_; }
  // The step's mode (host arrays of b); loads cuDNN on the first qualifying step.
  Mode plan_step(const ForwardBatch& b, const ModelConfig& c, DType dt);
  // Whether the step's K/V must be left in contiguous k/v rows (kFirstChunks).
  static bool uses_kv_rows(Mode m) { return m == kFirstChunks; }
  // One layer of a step plan_step() accepted: q [T(+slack), H, D] (post-RoPE), k/v [T(+slack),
  // Hkv, D] (kFirstChunks: this step's rows, post-RoPE; kPaged: unused, K/V come from kv, already
  // written), out [T(+slack), H, D], all dt; meta: the step's device metadata. False (after a
  // warning) when cuDNN failed, and for kNone: the caller then runs its own kernel for the whole layer.
  // D = kv.head_dim, Hkv = kv.num_kv_heads.
  bool attention(Mode m, const ForwardBatch& b, const cuda::CudaAttentionBatch& meta, const PagedKVLayer& kv,
                 const void* q, void* k, void* v, void* out, int64_t T, int H, DType dt, float scale,
                 cudaStream_t stream, const Builtin& builtin);
  // Layers run through cuDNN so far (tests), and those of them in kPaged mode.
  int64_t calls() const { return calls_; }
  int64_t paged_calls() const { return paged_calls_; }

 private:
  int padded(int len) const { return (len + bucket_ - 1) / bucket_ * bucket_; }
  int padded_kv(int64_t len) const;
  bool covered(int q_len, int ctx) const;  // kPaged: whether this sequence goes through cuDNN
  bool first_chunks(const ForwardBatch& b, const cuda::CudaAttentionBatch& meta, const void* q, void* k, void* v,
                    void* out, int64_t T, int H, int Hkv, int D, DType dt, float scale, cudaStream_t stream);
  bool paged(const ForwardBatch& b, const cuda::CudaAttentionBatch& meta, const PagedKVLayer& kv, const void* q,
             void* out, int H, int D, DType dt, float scale, cudaStream_t stream, const Builtin& builtin);
  // Builds the shape's plan on first use (logged); false (warned, bucket marked failed) if not.
  bool ready(const cuda::CudnnAttentionShape& shape);
  bool ensure_loaded();
  bool enabled_;
  int min_tokens_, bucket_;
  std::unique_ptr<cuda::CudnnAttention> att_;
  std::set<std::tuple<int, int, bool>> failed_;  // (seq_q, seq_kv, bottom_right) plans that did not build or run
  void* scratch_ = nullptr;              // K then V, [scratch_rows_, Hkv, D] each
  int64_t scratch_rows_ = 0, scratch_bytes_ = 0;
  int kv_buckets_ = 0;  // kv plan lengths per octave (VLM_CUDA_PREFILL_CUDNN_KV_BUCKETS); 0: one, the scratch's
  int64_t calls_ = 0, paged_calls_ = 0;
};

}  // namespace vlm
