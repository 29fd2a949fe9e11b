// ModelRunner: runs one scheduled step on the model. It reads only the SchedulerOutput, flattens
// it once into a ForwardBatch, makes the copy-on-write block copies, and runs the decoder over
// the paged KV cache, asking for logits only for the chunks that sample.
// On a multimodal model it also encodes the media (images, videos) of sequences whose chunk
// reaches their media tokens (all of a step's items in one encoder call), keeps the outputs on
// the sequence until the chunk holding its last media token has run, and feeds media-token rows
// through the decoder's EmbeddingOverride (a chunk may start or end inside an item's tokens). A
// step without media tokens runs exactly the text-only path. A backend that encodes media itself
// (StepBackend::encodes_media: the GPU) keeps the outputs in its memory and gets runs of device
// rows instead (no host round trip). Sequences whose MediaInputs carry
// M-RoPE positions (Qwen2-VL family) get ForwardBatch::mrope_positions for prefill and decode
// rows. The videos' tokens per frame are on each chunk's sequence: c.seq->media->video_spans()
// (engine/media_inputs.h), for the sparse-prefill grid pattern.
#pragma once

#include <vector>

#include "engine/backends/step_backend.h"
#include "engine/scheduling/scheduler_output.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/llm_decoder.h"
#include "model/families/model.h"
#include "model/methods/sink_anchors.h"
#include "kernels/sink_router/sink_router_config.h"

namespace vlm {

class ModelRunner {
 public:
  // All must outlive the runner. The backend runs the model's decoder (it owns the KV cache of
  // block_size-token blocks); the model's media side encodes on the host unless the backend
  // encodes media itself.
  ModelRunner(const Model& model, StepBackend& backend, int block_size);

  // Token ids, RoPE positions (logical), cache slots (physical, through the block tables),
  // modality tags, cu_seqlens, context lengths, block tables and finishes_prefill of every
  // chunk, in chunk order; logits_indices = the last row of each chunk that samples.
  // mrope_positions [T, 3] when any chunk's sequence has M-RoPE positions: prompt rows take
  // the prompt's, later rows p + rope_delta on all axes, other sequences (p, p, p).
  // With `sparse` (the engine's sparse-prefill default), each prefill chunk (more than one row)
  // of a sequence whose effective method (its request's override, else sparse->method) is on
  // and whose prompt has at least sparse->min_prompt_len tokens gets a sparse_prefill entry;
  // the vector stays empty when no chunk qualifies (the exact path).
  static ForwardBatch make_batch(const SchedulerOutput& out, int block_size,
                                 const SparsePrefillConfig* sparse = nullptr);

  // The engine's sparse-prefill default (method Off unless set).
  void set_sparse_prefill(const SparsePrefillConfig& cfg) { sparse_prefill_ = cfg; }

  // Runs the step on the backend, which keeps one logits row per sampling chunk, in chunk order.
  // Throws what the backend throws (InternalError); the cache may then hold partial writes.
  void run(const SchedulerOutput& out);

  int64_t num_images_encoded() const { return num_images_encoded_; }  // media items (images, videos)
  double encode_seconds() const { return encode_s_; }
  // Media-encode milliseconds since the last call: the host's encode time when the host encodes,
  // else the backend's device time (StepBackend::take_media_encode_ms). Call after the step's sample.
  double take_encode_ms();
  // SinkRouter: routes the sequences whose SamplingParams::sink_router is true, or unset when
  // default_on (their anchor stores go into the batch); off by default.
  void set_sink_router(bool default_on, const SinkRouterConfig& config);
  const SinkRouterCounters& sink_counters() const { return sink_counters_; }

 private:
  // Encodes the media of chunks that reach media tokens and have no embeddings yet: the items
  // not wholly before the chunk (those are in the KV cache: a prefix hit skips their encoding).
  void encode_media(const SchedulerOutput& out);
  // Fills the override rows [num_rows] of the batch's image tokens; false when it has none.
  bool gather_media(const SchedulerOutput& out, int64_t num_rows);
  void attach_sink_router(const SchedulerOutput& out, ForwardBatch& fb);

  const LlmDecoder& decoder_;
  StepBackend& backend_;
  int block_size_;
  const Model* multimodal_ = nullptr;  // the model when it has media, else null
  std::vector<float> override_embeds_;  // [T, planes * C] (Model::embedding_planes)
  std::vector<uint8_t> override_use_;   // [T]
  bool host_rows_ = false;              // override_embeds_ holds rows this step
  std::vector<DeviceRowRun> device_runs_;  // rows in the backend's memory (GPU-encoded media)
  int64_t num_images_encoded_ = 0;
  double encode_s_ = 0;
  double host_encode_ms_ = 0;  // host encode time not yet taken (take_encode_ms)
  bool sink_default_on_ = false;
  SinkRouterConfig sink_config_;
  SinkRouterCounters sink_counters_;
  SparsePrefillConfig sparse_prefill_;
};

}  // namespace vlm
