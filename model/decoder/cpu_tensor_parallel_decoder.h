// CpuTensorParallelDecoder: a decoder split over N ranks on the CPU (issue 42), each rank an
// LlmDecoder holding its shard (model/arch/llama_decoder.h) and a thread of its own per call,
// the ranks' collectives through a ThreadCommunicator. It is the exact reference of tensor
// parallelism: the GPU's ranks (NCCL) compute the same sums, and tests compare it with N = 1.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kernels/core/thread_communicator.h"
#include "model/decoder/llm_decoder.h"

namespace vlm {

class CpuTensorParallelDecoder {
 public:
  // N ranks of the checkpoint (LoadError when its shapes do not split over N, naming them).
  CpuTensorParallelDecoder(const ModelConfig& config, const WeightStore& weights, const DecoderWeightNames& names, int size);
  ~CpuTensorParallelDecoder();

  int size() const { return static_cast<int>(ranks_.size()); }
  const LlmDecoder& rank(int r) const { return *ranks_.at(static_cast<size_t>(r)); }
  // The config rank r's KV cache is made for (its KV heads; all ranks the same).
  ModelConfig kv_config() const { return ranks_[0]->kv_config(); }

  // LlmDecoder::forward over every rank at once (one thread each, joined before returning):
  // kv[r] is rank r's cache (kv_config()'s heads; the batch's block ids index every rank's
  // cache alike). logits: [L, V], every rank's LM head slice gathered. A rank's exception aborts
  // the others' collectives and is rethrown here (the first in rank order); the group is then
  // unusable (InternalError on every later call). Sparse prefill and SinkRouter run per rank on
  // its heads (per-head patterns and anchors by the model's heads): the same as N = 1 (SinkRouter
  // and LOOK-M need the KV heads split, not replicated). batch.sink_anchors' stores and
  // batch.look_m's scores are sized here.
  void forward(const ForwardBatch& batch, const std::vector<std::span<const PagedKVLayer>>& kv,
               std::vector<float>& logits, const EmbeddingOverride& override = {}) const;

 private:
  std::shared_ptr<ThreadGroup> group_;
  std::vector<std::unique_ptr<ThreadCommunicator>> comms_;
  std::vector<std::unique_ptr<LlmDecoder>> ranks_;
};

}  // namespace vlm
