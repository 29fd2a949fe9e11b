// ModelRunner: runs one scheduled step on the model. It reads only the SchedulerOutput, flattens
// it once into a ForwardBatch, makes the copy-on-write block copies, and runs the decoder over
// the paged KV cache, asking for logits only for the chunks that sample.
#pragma once

#include <vector>

#include "engine/kv_cache.h"
#include "engine/scheduler_output.h"
#include "model/forward_batch.h"
#include "model/llm_decoder.h"
#include "model/sink_anchors.h"
#include "kernels/sink_router/sink_router_config.h"

namespace vlm {

class ModelRunner {
 public:
  // Both must outlive the runner.
  ModelRunner(const LlmDecoder& decoder, KVCache& cache);

  // Token ids, RoPE positions (logical), cache slots (physical, through the block tables),
  // modality tags, cu_seqlens, context lengths, block tables and finishes_prefill of every
  // chunk, in chunk order; logits_indices = the last row of each chunk that samples.
  static ForwardBatch make_batch(const SchedulerOutput& out, int block_size);

  // logits[R, V]: one row per sampling chunk, in chunk order (resized). Throws what the decoder
  // throws (InternalError); the cache may then hold partial writes of this step.
  void run(const SchedulerOutput& out, std::vector<float>& logits);

  // SinkRouter: routes the sequences whose SamplingParams::sink_router is true, or unset when
  // default_on (their anchor stores go into the batch); off by default.
  void set_sink_router(bool default_on, const SinkRouterConfig& config);
  const SinkRouterCounters& sink_counters() const { return sink_counters_; }

 private:
  void attach_sink_router(const SchedulerOutput& out, ForwardBatch& fb);

  const LlmDecoder& decoder_;
  KVCache& cache_;
  bool sink_default_on_ = false;
  SinkRouterConfig sink_config_;
  SinkRouterCounters sink_counters_;
};

}  // namespace vlm
