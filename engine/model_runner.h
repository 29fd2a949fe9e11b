// ModelRunner: runs one scheduled step on the model. It reads only the SchedulerOutput, flattens
// it once into a ForwardBatch, makes the copy-on-write block copies, and runs the decoder over
// the paged KV cache, asking for logits only for the chunks that sample.
#pragma once

#include <vector>

#include "engine/kv_cache.h"
#include "engine/scheduler_output.h"
#include "model/forward_batch.h"
#include "model/llm_decoder.h"

namespace vlm {

class ModelRunner {
 public:
  // Both must outlive the runner.
  ModelRunner(const LlmDecoder& decoder, KVCache& cache);

  // Token ids, RoPE positions (logical), cache slots (physical, through the block tables),
  // modality tags, cu_seqlens, context lengths, block tables and finishes_prefill of every
  // chunk, in chunk order; logits_indices = the last row of each chunk that samples.
  // With `sparse` (the engine's sparse-prefill default), each prefill chunk (more than one row)
  // of a sequence whose effective method (its request's override, else sparse->method) is on
  // and whose prompt has at least sparse->min_prompt_len tokens gets a sparse_prefill entry;
  // the vector stays empty when no chunk qualifies (the exact path).
  static ForwardBatch make_batch(const SchedulerOutput& out, int block_size,
                                 const SparsePrefillConfig* sparse = nullptr);

  // The engine's sparse-prefill default (method Off unless set).
  void set_sparse_prefill(const SparsePrefillConfig& cfg) { sparse_prefill_ = cfg; }

  // logits[R, V]: one row per sampling chunk, in chunk order (resized). Throws what the decoder
  // throws (InternalError); the cache may then hold partial writes of this step.
  void run(const SchedulerOutput& out, std::vector<float>& logits);

 private:
  const LlmDecoder& decoder_;
  KVCache& cache_;
  SparsePrefillConfig sparse_prefill_;
};

}  // namespace vlm
