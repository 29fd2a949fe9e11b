// StepBackend: the seam between the engine and the device that runs the model (shared/DESIGN.md,
// "The GPU backend"). The engine (requests, scheduler, block manager, sampling parameters) stays
// on the host and never learns which backend runs; a backend owns the paged KV cache in its
// memory (block ids mean the same on both sides; only the backend touches KV bytes) and
// implements "run this ForwardBatch" and "give me each sequence's sampled token (and asked-for
// logprobs)" with the Sampler's semantics (engine/sampling/sampler.h).
//   CpuBackend  (engine/backends/cpu_backend.h): LlmDecoder + KVCache + Sampler, the exact path.
//   CudaBackend (engine/cuda/cuda_backend.h): CudaDecoder + sampling on the GPU.
// make_step_backend() (engine/backends/make_step_backend.h) picks one from EngineConfig.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"
#include "engine/scheduling/sequence.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/llm_decoder.h"
#include "model/media/media_pixels.h"

namespace vlm {

// One token to pick: `seq`'s next token from row `row` of the last forward's logits (rows in
// logits_indices order). Several tasks may share a row (the n choices of one request).
struct SampleTask {
  Sequence* seq = nullptr;
  int64_t row = 0;
};

class StepBackend {
 public:
  virtual ~StepBackend() = default;
  virtual std::string device() const = 0;  // "cpu", or "cuda:0 (NVIDIA H100 ...)"
  virtual int64_t num_kv_blocks() const = 0;
  virtual int64_t kv_bytes_per_block() const = 0;  // K + V over all layers
  virtual DType kv_dtype() const = 0;
  // Whether forward() runs sparse prefill configured as cfg (the engine rejects a request asking
  // for one it does not, with a 400). The CPU runs every method.
  virtual bool runs_sparse_prefill(const SparsePrefillConfig& cfg) const { return true; }
  // Whether forward() runs LOOK-M on this model's shapes (a request asking for it when not: 400).
  virtual bool runs_look_m() const { return true; }
  // Whether forward() runs SinkRouter decode routing (a request asking for it when not: 400).
  virtual bool runs_sink_router() const { return true; }
  // What SchedulerConfig::prefill_only_batched_tokens auto (vlm-server's default) means here: the
  // token budget of a step without decodes (0: off). The CPU: off; the GPU:
  // kCudaPrefillOnlyBatchedTokens (engine_config.h), its step activations reserved for it.
  virtual int prefill_only_batched_tokens_auto() const { return 0; }
  // Copies block src's KV to block dst in every layer (copy-on-write of shared blocks).
  virtual void copy_block(int32_t src, int32_t dst) = 0;
  // Runs the decoder over the batch, writing its KV; keeps the logits of its logits_indices rows
  // for sample(). Throws what the decoder throws; the cache may then hold partial writes.
  virtual void forward(const ForwardBatch& batch, const EmbeddingOverride& override) = 0;
  // results[i] = the token for tasks[i] (resized); advances each non-greedy sequence's RNG by
  // exactly one draw, as Sampler::sample does.
  virtual void sample(std::span<const SampleTask> tasks, std::vector<SampleResult>& results) = 0;

  // Media on the backend's device. encodes_media(): the backend encodes the model's media itself
  // (the CUDA backend with the model's vision tower on the GPU); otherwise the ModelRunner encodes
  // on the host (Model::encode_media) and passes host rows.
  virtual bool encodes_media() const { return false; }
  // items (each passed the model's media_tokens() and check_media()) -> their embeddings
  // [sum tokens, C] in the backend's memory, item after item (C: the decoder's width times the
  // model's embedding_planes(), the planes side by side); ordered before the next forward.
  // Rows may be encoded later, on DeviceEmbeddings::ensure_rows: `owners` keep the items alive
  // as long as the embeddings (the MediaInputs holding them).
  virtual std::shared_ptr<const DeviceEmbeddings> encode_media(std::span<const MediaPixels* const> items,
                                                               std::vector<std::shared_ptr<const void>> owners);
  // Throws RequestError (400, param "messages") when item k cannot be encoded within the
  // backend's memory plan (never an out-of-memory failure later).
  virtual void check_media(const MediaPixels& /*item*/, int /*k*/) const {}
  // Milliseconds the backend's device spent encoding media since the last call, counting the work
  // completed by now (all of it after sample(), which waits for the step): the debug timeline's
  // media-encode share. 0 when the backend does not encode media (host encoding is the runner's).
  virtual double take_media_encode_ms() { return 0.0; }
};

}  // namespace vlm
