#include "model/decoder/cuda/cuda_sink_router_step.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/sink_router/cuda_sink_router.h"
#include "kernels/sink_router/sink_router_config.h"
#include "model/methods/sink_anchors.h"

namespace vlm {

bool CudaSinkRouterStep::begin(const ForwardBatch& b, bool all_decode, bool fast, int num_kv_heads, int head_dim,
                               DType kv_dtype, cudaStream_t stream) {
  active_ = pending_ = false;  // counts of a step that was never settled are dropped
  routed_layers_ = 0;
  const int S = b.num_seqs();
  if (b.sink_anchors.empty() || !all_decode || !fast) return false;
  VLM_CHECK(static_cast<int>(b.sink_anchors.size()) == S && b.sink_router != nullptr,
            "{} anchor stores for {} sequences (config set: {})", b.sink_anchors.size(), S, b.sink_router != nullptr);
  config_ = b.sink_router;
  counters_ = b.sink_counters;
  Hkv_ = num_kv_heads;
  D_ = head_dim;
  kv_esz_ = static_cast<int>(dtype_size(kv_dtype));
  stores_.assign(static_cast<size_t>(S), nullptr);
  ctx_.assign(b.context_lens.begin(), b.context_lens.end());
  host_.reserve(static_cast<size_t>(S) * 4);
  auto* flags = host_.as<uint8_t>();
  for (int s = 0; s < S; ++s) {
    SinkAnchors* a = b.sink_anchors[static_cast<size_t>(s)];
    const bool route = a != nullptr && !b.finishes_prefill[static_cast<size_t>(s)];
    VLM_CHECK(!route || a->probe == nullptr, "SinkRouter calibration probes run on the CPU only");
    flags[s] = route ? 1 : 0;
    if (route) stores_[static_cast<size_t>(s)] = a;
    active_ |= route;
  }
  if (!active_) return false;
  flags_.reserve(static_cast<size_t>(S));
  counts_.reserve(static_cast<size_t>(S) * 4);
  skip_.reserve(static_cast<size_t>(S) * Hkv_);
  anchor_k_.reserve(static_cast<size_t>(S) * Hkv_ * D_ * 4);
  if (config_->surrogate == SinkSurrogate::AnchorValue) anchor_v_.reserve(static_cast<size_t>(S) * Hkv_ * D_ * 4);
  VLM_CUDA_CHECK(cudaMemcpyAsync(flags_.get(), flags, static_cast<size_t>(S), cudaMemcpyHostToDevice, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(counts_.get(), 0, static_cast<size_t>(S) * 4, stream));
  return true;
}

void CudaSinkRouterStep::route_layer(int layer, const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                                     cuda::CudaAttentionBatch& meta, cudaStream_t stream) {
  meta.group_skip = nullptr;
  meta.group_surrogate = nullptr;
  if (!active_ || !config_->routes_layer(layer)) return;
  const bool value = config_->surrogate == SinkSurrogate::AnchorValue;
  cuda::sink_gather_anchors(kv, meta.block_tables, meta.max_blocks_per_seq, meta.num_seqs, anchor_k_.as<float>(),
                            value ? anchor_v_.as<float>() : nullptr, stream);
  cuda::sink_route_groups(q, act, num_heads, anchor_k_.as<float>(), Hkv_, D_, meta.context_lens, flags_.as<uint8_t>(),
                          meta.num_seqs, *config_, nullptr, skip_.as<uint8_t>(), counts_.as<int32_t>(), stream);
  meta.group_skip = skip_.as<uint8_t>();
  meta.group_surrogate = value ? anchor_v_.as<float>() : nullptr;
  ++routed_layers_;
}

void CudaSinkRouterStep::end(cudaStream_t stream) {
  if (!active_ || routed_layers_ == 0) return;
  // host_ held the flags, which the upload has consumed by now (same stream, earlier).
  VLM_CUDA_CHECK(cudaMemcpyAsync(host_.get(), counts_.get(), stores_.size() * 4, cudaMemcpyDeviceToHost, stream));
  pending_ = true;
}

void CudaSinkRouterStep::settle() {
  if (!pending_) return;
  pending_ = false;
  const auto* counts = host_.as<int32_t>();
  int64_t routed = 0, skipped = 0, bytes = 0;
  for (size_t s = 0; s < stores_.size(); ++s) {
    if (stores_[s] == nullptr) continue;
    const int64_t r = static_cast<int64_t>(routed_layers_) * Hkv_, n = counts[s];
    stores_[s]->groups_routed += r;
    stores_[s]->groups_skipped += n;
    routed += r;
    skipped += n;
    bytes += n * ctx_[s] * D_ * 2 * kv_esz_;
  }
  if (counters_) {
    counters_->groups_routed += routed;
    counters_->groups_skipped += skipped;
    counters_->kv_bytes_skipped += bytes;
  }
}

}  // namespace vlm
