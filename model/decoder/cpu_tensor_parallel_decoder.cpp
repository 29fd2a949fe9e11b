#include "model/decoder/cpu_tensor_parallel_decoder.h"

#include <exception>
#include <thread>

#include "kernels/core/check.h"
#include "model/methods/look_m_state.h"
#include "model/methods/sink_anchors.h"

namespace vlm {

CpuTensorParallelDecoder::CpuTensorParallelDecoder(const ModelConfig& config, const WeightStore& weights,
                                                   const DecoderWeightNames& names, int size)
    : group_(std::make_shared<ThreadGroup>(size)) {
  for (int r = 0; r < size; ++r) {
    comms_.push_back(std::make_unique<ThreadCommunicator>(group_, r));
    ranks_.push_back(std::make_unique<LlmDecoder>(config, weights, names, TensorParallel{r, size, comms_.back().get()}));
  }
}

CpuTensorParallelDecoder::~CpuTensorParallelDecoder() = default;

void CpuTensorParallelDecoder::forward(const ForwardBatch& batch, const std::vector<std::span<const PagedKVLayer>>& kv,
                                       std::vector<float>& logits, const EmbeddingOverride& override) const {
  const int n = size();
  VLM_CHECK(static_cast<int>(kv.size()) == n, "{} KV caches for {} ranks", kv.size(), n);
  VLM_CHECK(!group_->aborted(), "the tensor-parallel group failed in an earlier call");
  // SinkRouter's stores hold the model's KV heads; sized for every layer here, so the ranks only
  // write their own heads' rows (AttentionLayer's HeadSlice).
  const ModelConfig& m = ranks_[0]->config();
  for (SinkAnchors* a : batch.sink_anchors)
    if (a != nullptr && m.num_layers > 0)
      a->ensure_layer(static_cast<int>(m.num_layers) - 1, static_cast<int>(m.num_kv_heads), static_cast<int>(m.head_dim));
  for (LookMState* st : batch.look_m)  // LOOK-M's [L, Hkv, prompt] scores: each rank adds its KV heads' rows
    if (st != nullptr) st->host_scores();
  std::vector<std::vector<float>> rank_logits(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto run = [&](int r) {
    try {
      ranks_[static_cast<size_t>(r)]->forward(batch, kv[static_cast<size_t>(r)],
                                              r == 0 ? logits : rank_logits[static_cast<size_t>(r)], override);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      group_->abort();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace vlm
