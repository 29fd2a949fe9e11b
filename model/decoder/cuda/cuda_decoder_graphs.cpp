// CudaDecoder's decode steps as CUDA graphs (the contract is in cuda_decoder.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/decoder/cuda/cuda_decoder.h"
#include "model/decoder/cuda/decode_graph.h"

namespace vlm {

namespace {

// Metadata entries (int32) one graph may hold: bounds the graphs' memory (1 MiB each).
constexpr int64_t kMaxGraphMeta = int64_t(1) << 18;
constexpr int kMinContextBucket = 256;

int64_t seq_bucket(int64_t S) {
  if (S <= 4) return S;
  if (S <= 64) return (S + 7) / 8 * 8;
  return (S + 31) / 32 * 32;
}

int64_t context_bucket(int64_t ctx) {
  int64_t c = kMinContextBucket;
  while (c < ctx) c *= 2;
  return c;
}

// Two routing configs that capture the same launches.
bool same_routing(const SinkRouterConfig& a, const SinkRouterConfig& b) {
  return a.aggregation == b.aggregation && a.surrogate == b.surrogate && a.c0 == b.c0 && a.c1 == b.c1 &&
         a.c2 == b.c2 && a.c3 == b.c3 && a.length_ref == b.length_ref && a.tau_min == b.tau_min &&
         a.tau_max == b.tau_max && a.num_dense_layers == b.num_dense_layers;
}

}  // namespace

void CudaDecoder::drop_graphs() {
  if (graphs_.empty()) return;
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  graphs_.clear();
}

bool CudaDecoder::forward_graph(const ForwardBatch& b, const EmbeddingOverride& override) {
  const int64_t T = b.num_tokens(), S = b.num_seqs(), R = static_cast<int64_t>(b.logits_indices.size());
  if (opt_.enforce_eager || override.use != nullptr || override.num_device_runs > 0 || T != S || R != S) return false;
  int32_t max_ctx = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s] != 1) return false;
    max_ctx = std::max(max_ctx, b.context_lens[s]);
  }
  const bool mrope = !b.mrope_positions.empty();
  const int64_t Sb = seq_bucket(S), Cb = context_bucket(max_ctx), W = Cb / opt_.block_size;
  if (Sb > cap_rows_ || Sb > cap_tokens_ || W < 1 || Cb % opt_.block_size != 0) return false;
  // SinkRouter: which rows route and their stores' anchors (the flags go into the metadata after
  // the rows, the pointers after them at an 8-byte boundary: uploaded with every replay).
  std::vector<uint8_t> flags(static_cast<size_t>(Sb), 0);
  std::vector<const float*> anchors(static_cast<size_t>(Sb), nullptr);
  const ModelConfig& c = config();
  const bool sink = methods_ && sink_.plan(b, true, decode_shape(), static_cast<int>(c.num_layers),
                                           static_cast<int>(c.num_kv_heads), static_cast<int>(c.head_dim), kv_dtype(),
                                           Sb, flags.data(), anchors.data());
  if (sink && sink_.probing()) return false;  // calibration steps run eagerly (cuda_sink_router_step.h)
  const int64_t sizes[] = {Sb, Sb, mrope ? 3 * Sb : 0, Sb, Sb + 1, Sb, Sb * W, Sb, sink ? (Sb + 3) / 4 : 0};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const int64_t anchors_at = (total + 1) / 2 * 2;  // int32 entries; 8-byte aligned
  static_assert(sizeof(const float*) == 8, "anchor pointers take two metadata entries");
  if (sink) total = anchors_at + 2 * Sb;
  if (total > kMaxGraphMeta) return false;
  for (int64_t t = 0; t < T; ++t)
    VLM_CHECK(b.token_ids[t] >= 0 && b.token_ids[t] < config().vocab_size, "token id {} at row {} outside the vocabulary",
              b.token_ids[t], t);
  for (int64_t r = 0; r < R; ++r)
    VLM_CHECK(b.logits_indices[r] >= 0 && b.logits_indices[r] < T, "logits index {} outside the batch of {}",
              b.logits_indices[r], T);

  Graph* g = nullptr;
  for (auto& e : graphs_)
    if (e->seqs == Sb && e->context == Cb && e->mrope == mrope && e->sink == sink &&
        (!sink || same_routing(e->sink_config, *b.sink_router)))
      g = e.get();
  if (g == nullptr) {
    if (static_cast<int>(graphs_.size()) >= std::max(1, opt_.max_graphs)) {  // drop the least recently used
      VLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const auto& a, const auto& c) { return a->last_use < c->last_use; });
      graphs_.erase(lru);
    }
    auto e = std::make_unique<Graph>();
    e->seqs = Sb;
    e->context = Cb;
    e->mrope = mrope;
    e->sink = sink;
    if (sink) e->sink_config = *b.sink_router;
    e->meta.resize(static_cast<size_t>(total) * 4);
    graphs_.push_back(std::move(e));
    g = graphs_.back().get();
  }
  g->last_use = ++graph_clock_;

  // Stage the metadata in the graph's layout (padding: id 0, position 0, no slot, no context).
  VLM_CUDA_CHECK(cudaEventSynchronize(graph_staged_));  // the previous upload has read the staging
  graph_host_.reserve(static_cast<size_t>(total) * 4);
  int32_t* hp = graph_host_.as<int32_t>();
  std::memset(hp, 0, static_cast<size_t>(total) * 4);
  int32_t* ids = hp;
  int32_t* pos = ids + Sb;
  int32_t* mpos = pos + Sb;
  int32_t* slots = mpos + sizes[2];
  int32_t* cu = slots + Sb;
  int32_t* ctx = cu + Sb + 1;
  int32_t* tables = ctx + Sb;
  int32_t* rows = tables + Sb * W;
  std::memcpy(ids, b.token_ids.data(), static_cast<size_t>(S) * 4);
  std::memcpy(pos, b.positions.data(), static_cast<size_t>(S) * 4);
  if (mrope) std::memcpy(mpos, b.mrope_positions.data(), static_cast<size_t>(3 * S) * 4);
  std::fill(slots, slots + Sb, -1);
  std::memcpy(slots, b.slot_mapping.data(), static_cast<size_t>(S) * 4);
  for (int64_t s = 0; s <= Sb; ++s) cu[s] = static_cast<int32_t>(s);
  std::memcpy(ctx, b.context_lens.data(), static_cast<size_t>(S) * 4);
  const int64_t copy_w = std::min<int64_t>(W, b.max_blocks_per_seq);
  for (int64_t s = 0; s < S; ++s)
    std::memcpy(tables + s * W, b.block_tables.data() + s * b.max_blocks_per_seq, static_cast<size_t>(copy_w) * 4);
  std::memcpy(rows, b.logits_indices.data(), static_cast<size_t>(R) * 4);
  if (sink) std::memcpy(rows + Sb, flags.data(), flags.size());
  if (sink) std::memcpy(hp + anchors_at, anchors.data(), anchors.size() * sizeof(const float*));
  VLM_CUDA_CHECK(
      cudaMemcpyAsync(g->meta.get(), hp, static_cast<size_t>(total) * 4, cudaMemcpyHostToDevice, stream_));
  VLM_CUDA_CHECK(cudaEventRecord(graph_staged_, stream_));

  const int32_t* dp = g->meta.as<int32_t>();
  d_ids_ = dp;
  d_pos_ = dp + Sb;
  d_mrope_ = mrope ? dp + 2 * Sb : nullptr;
  d_slots_ = dp + 2 * Sb + sizes[2];
  d_cu_ = d_slots_ + Sb;
  d_ctx_ = d_cu_ + Sb + 1;
  d_tables_ = d_ctx_ + Sb;
  d_rows_ = d_tables_ + Sb * W;
  const auto* d_flags = reinterpret_cast<const uint8_t*>(d_rows_ + Sb);
  const auto* d_anchors = reinterpret_cast<const float* const*>(dp + anchors_at);
  cuda::CudaAttentionBatch meta;
  meta.num_seqs = static_cast<int>(Sb);
  meta.cu_seqlens_q = d_cu_;
  meta.context_lens = d_ctx_;
  meta.block_tables = d_tables_;
  meta.max_blocks_per_seq = static_cast<int>(W);
  meta.max_q_len = 1;
  meta.max_context_len = static_cast<int>(Cb);

  if (g->exec != nullptr && g->epoch == buffers_epoch_ && (!g->sink || g->sink_epoch == sink_.epoch())) {
    VLM_CUDA_CHECK(cudaGraphLaunch(g->exec, stream_));
    ++graph_launches_;
    num_logit_rows_ = R;
    return true;
  }
  // First run of this bucket (or its buffers moved): run it eagerly (cuBLASLt plans, workspace
  // sizes and kernel attributes are settled there), then capture the same work.
  const auto step = [&] {
    if (sink) sink_.start(d_flags, d_anchors, stream_);  // the counts' zeroing is part of the graph
    run_step(Sb, Sb, meta, EmbeddingOverride{});
  };
  step();
  if (g->exec) {
    cudaGraphExecDestroy(g->exec);
    g->exec = nullptr;
  }
  cudaGraph_t graph = nullptr;
  VLM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    step();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  VLM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  const cudaError_t st = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  VLM_CUDA_CHECK(st);
  g->epoch = buffers_epoch_;
  g->sink_epoch = sink_.epoch();
  ++graphs_captured_;
  num_logit_rows_ = R;
  return true;
}

}  // namespace vlm
