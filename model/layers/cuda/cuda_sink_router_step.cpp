#include "model/layers/cuda/cuda_sink_router_step.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/sink_router/cuda_sink_router.h"
#include "kernels/sink_router/sink_router_config.h"
#include "model/methods/sink_anchors.h"

namespace vlm {

// Device arrays of one size ([2, L, Hkv, D] f32) for the stores' anchors: cudaMalloc'd 32 at a
// time and kept until the pool goes (with the decoder and the last store holding one), so neither
// a capture nor a request's end allocates or frees (cudaFree would synchronize the device). An
// array comes back when its last store lets it go; a later capture writes it on the decoder's
// stream, after every step that read it (all of them run on that stream).
struct CudaSinkRouterStep::AnchorPool : std::enable_shared_from_this<AnchorPool> {
  static constexpr size_t kPerChunk = 32;
  std::mutex mu;
  size_t bytes = 0;  // per array
  std::vector<cuda::DeviceBuffer> chunks;
  std::vector<float*> free;

  std::shared_ptr<void> take() {
    std::lock_guard<std::mutex> lock(mu);
    if (free.empty()) {
      chunks.emplace_back(bytes * kPerChunk);
      for (size_t i = kPerChunk; i-- > 0;) free.push_back(chunks.back().as<float>() + i * bytes / 4);
    }
    float* p = free.back();
    free.pop_back();
    return std::shared_ptr<void>(p, [pool = shared_from_this()](void* q) {
      std::lock_guard<std::mutex> lock(pool->mu);
      pool->free.push_back(static_cast<float*>(q));
    });
  }
};

namespace {

// What SinkAnchors::device_kv holds on the GPU: per rank (one GPU: [1]) a pool array on its GPU
// ([2, L, Hkv, D] f32 of its KV heads), null until that rank captured it.
struct DeviceAnchorSet {
  std::vector<std::shared_ptr<void>> ranks;
};

const float* rank_anchors(const SinkAnchors& a, int rank) {
  const auto* set = static_cast<const DeviceAnchorSet*>(a.device_kv.get());
  if (set == nullptr || rank >= static_cast<int>(set->ranks.size())) return nullptr;
  return static_cast<const float*>(set->ranks[static_cast<size_t>(rank)].get());
}

void fresh_set(SinkAnchors& a, int ranks) {
  auto set = std::make_shared<DeviceAnchorSet>();
  set->ranks.resize(static_cast<size_t>(ranks));
  a.device_kv = std::move(set);
}

}  // namespace

void CudaSinkRouterStep::prepare(const ForwardBatch& b, int ranks) {
  if (!captures(b)) return;
  for (size_t s = 0; s < b.sink_anchors.size(); ++s) {
    SinkAnchors* a = b.sink_anchors[s];
    if (a != nullptr && b.finishes_prefill[s]) fresh_set(*a, ranks);
  }
}

bool CudaSinkRouterStep::captures(const ForwardBatch& b) {
  VLM_CHECK(b.sink_anchors.empty() || b.finishes_prefill.size() == b.sink_anchors.size(),
            "{} anchor stores for {} finishes_prefill flags", b.sink_anchors.size(), b.finishes_prefill.size());
  for (size_t s = 0; s < b.sink_anchors.size(); ++s)
    if (b.sink_anchors[s] != nullptr && b.finishes_prefill[s]) return true;
  return false;
}

void CudaSinkRouterStep::capture(const ForwardBatch& b, const std::vector<PagedKVLayer>& kv,
                                 const int32_t* block_tables, cudaStream_t stream) {
  if (!captures(b)) return;
  const int L = static_cast<int>(kv.size());
  const size_t bytes = size_t{2} * L * kv[0].num_kv_heads * kv[0].head_dim * 4;
  if (pool_ == nullptr) {
    pool_ = std::make_shared<AnchorPool>();
    pool_->bytes = bytes;
  }
  VLM_CHECK(pool_->bytes == bytes, "anchor arrays of {} bytes, {} expected", bytes, pool_->bytes);
  for (size_t s = 0; s < b.sink_anchors.size(); ++s) {
    SinkAnchors* a = b.sink_anchors[s];
    if (a == nullptr || !b.finishes_prefill[s]) continue;
    if (ranks_ == 1) fresh_set(*a, 1);  // one GPU: a fresh set here
    auto* set = static_cast<DeviceAnchorSet*>(a->device_kv.get());
    VLM_CHECK(set != nullptr && static_cast<int>(set->ranks.size()) == ranks_ && set->ranks[rank_] == nullptr,
              "SinkRouter anchors of rank {} of {}: the store's set was not prepared for this step "
              "(CudaSinkRouterStep::prepare)", rank_, ranks_);
    set->ranks[rank_] = pool_->take();
    auto* store = static_cast<float*>(set->ranks[rank_].get());
    for (int l = 0; l < L; ++l)
      cuda::sink_capture_anchors(kv[static_cast<size_t>(l)], block_tables + static_cast<int64_t>(s) * b.max_blocks_per_seq,
                                 l, L, store, stream);
  }
}

bool CudaSinkRouterStep::plan(const ForwardBatch& b, bool all_decode, bool fast, int num_layers, int num_kv_heads,
                              int head_dim, DType kv_dtype, int64_t seqs, uint8_t* flags, const float** anchors) {
  active_ = pending_ = probing_ = false;  // counts of a step that was never settled are dropped
  const int S = b.num_seqs();
  VLM_CHECK(seqs >= S, "{} routing rows for {} sequences", seqs, S);
  std::fill(flags, flags + seqs, uint8_t{0});
  std::fill(anchors, anchors + seqs, nullptr);
  if (b.sink_anchors.empty() || !all_decode || !fast) return false;
  VLM_CHECK(static_cast<int>(b.sink_anchors.size()) == S && b.sink_router != nullptr,
            "{} anchor stores for {} sequences (config set: {})", b.sink_anchors.size(), S, b.sink_router != nullptr);
  config_ = b.sink_router;
  counters_ = b.sink_counters;
  Hkv_ = num_kv_heads;
  D_ = head_dim;
  kv_esz_ = static_cast<int>(dtype_size(kv_dtype));
  routed_layers_ = 0;
  num_layers_ = num_layers;
  for (int l = 0; l < num_layers; ++l) routed_layers_ += config_->routes_layer(l) ? 1 : 0;
  stores_.assign(static_cast<size_t>(S), nullptr);
  ctx_.assign(b.context_lens.begin(), b.context_lens.end());
  for (int s = 0; s < S; ++s) {
    SinkAnchors* a = b.sink_anchors[static_cast<size_t>(s)];
    // As the CPU: a sequence routes once its anchors are captured (its prefill has finished).
    const float* mine = a != nullptr ? rank_anchors(*a, rank_) : nullptr;  // this rank's KV heads' anchors
    const bool route = a != nullptr && !b.finishes_prefill[static_cast<size_t>(s)] && mine != nullptr;
    flags[s] = route ? 1 : 0;
    anchors[s] = route ? mine : nullptr;
    probing_ |= route && a->probe != nullptr;
    VLM_CHECK(!(route && a->probe != nullptr && ranks_ > 1),
              "SinkRouter calibration probes run on one GPU, not under tensor parallelism ({} ranks)", ranks_);
    if (route) stores_[static_cast<size_t>(s)] = a;
    active_ |= route;
  }
  if (!active_) return false;
  const void* before[] = {counts_.get(), skip_.get(), anchor_v_.get()};
  host_.reserve(static_cast<size_t>(seqs) * 4);
  counts_.reserve(static_cast<size_t>(seqs) * 4);
  skip_.reserve(static_cast<size_t>(seqs) * Hkv_);
  if (config_->surrogate == SinkSurrogate::AnchorValue) anchor_v_.reserve(static_cast<size_t>(seqs) * Hkv_ * D_ * 4);
  const void* after[] = {counts_.get(), skip_.get(), anchor_v_.get()};
  if (!std::equal(before, before + 3, after)) ++epoch_;
  return true;
}

void CudaSinkRouterStep::start(const uint8_t* d_flags, const float* const* d_anchors, cudaStream_t stream) {
  d_flags_ = d_flags;
  d_anchors_ = d_anchors;
  VLM_CUDA_CHECK(cudaMemsetAsync(counts_.get(), 0, counts_.bytes(), stream));
}

bool CudaSinkRouterStep::begin(const ForwardBatch& b, bool all_decode, bool fast, int num_layers, int num_kv_heads,
                               int head_dim, DType kv_dtype, cudaStream_t stream) {
  const int S = b.num_seqs();
  const size_t bytes = static_cast<size_t>(S) * (sizeof(float*) + 1);
  host_.reserve(std::max(bytes, static_cast<size_t>(S) * 4));
  auto* ptrs = host_.as<const float*>();
  auto* flags = reinterpret_cast<uint8_t*>(ptrs + S);
  if (!plan(b, all_decode, fast, num_layers, num_kv_heads, head_dim, kv_dtype, S, flags, ptrs)) return false;
  flags_.reserve(bytes);
  VLM_CUDA_CHECK(cudaMemcpyAsync(flags_.get(), host_.get(), bytes, cudaMemcpyHostToDevice, stream));
  const auto* d_ptrs = flags_.as<const float*>();
  start(reinterpret_cast<const uint8_t*>(d_ptrs + S), d_ptrs, stream);
  return true;
}

void CudaSinkRouterStep::route_layer(int layer, const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                                     cuda::CudaAttentionBatch& meta, cudaStream_t stream) {
  meta.group_skip = nullptr;
  meta.group_surrogate = nullptr;
  if (!active_ || !config_->routes_layer(layer)) return;
  float* value = config_->surrogate == SinkSurrogate::AnchorValue ? anchor_v_.as<float>() : nullptr;
  const int64_t S = meta.num_seqs;
  float* scores = nullptr;
  uint8_t* skip = skip_.as<uint8_t>();
  if (probing_) {  // an eager step: this layer's scores, decisions and head masses kept for settle()
    H_ = num_heads;
    probe_scores_.reserve(static_cast<size_t>(num_layers_ * S * Hkv_) * 4);
    probe_skip_.reserve(static_cast<size_t>(num_layers_ * S * Hkv_));
    probe_mass_.reserve(static_cast<size_t>(num_layers_ * S * H_) * 4);
    scores = probe_scores_.as<float>() + layer * S * Hkv_;
    skip = probe_skip_.as<uint8_t>() + layer * S * Hkv_;
    cuda::sink_first_token_mass(q, act, num_heads, kv, meta.block_tables, meta.max_blocks_per_seq, meta.context_lens,
                                d_flags_, meta.num_seqs, 1.0f / std::sqrt(static_cast<float>(D_)),
                                probe_mass_.as<float>() + layer * S * H_, stream);
  }
  cuda::sink_route_from_stores(q, act, num_heads, d_anchors_, layer, num_layers_, Hkv_, D_, meta.context_lens, d_flags_,
                               meta.num_seqs, *config_, scores, skip, counts_.as<int32_t>(), value, stream);
  meta.group_skip = skip;
  meta.group_surrogate = value;
}

void CudaSinkRouterStep::end(cudaStream_t stream) {
  if (!active_ || routed_layers_ == 0) return;
  // host_ held an eager step's flags, which the upload has consumed by now (same stream, earlier).
  VLM_CUDA_CHECK(cudaMemcpyAsync(host_.get(), counts_.get(), stores_.size() * 4, cudaMemcpyDeviceToHost, stream));
  pending_ = true;
}

void CudaSinkRouterStep::report_probes() {
  const size_t S = stores_.size();
  std::vector<float> scores(static_cast<size_t>(num_layers_) * S * Hkv_), mass(static_cast<size_t>(num_layers_) * S * H_);
  std::vector<uint8_t> skip(scores.size());
  VLM_CUDA_CHECK(cudaMemcpy(scores.data(), probe_scores_.get(), scores.size() * 4, cudaMemcpyDeviceToHost));
  VLM_CUDA_CHECK(cudaMemcpy(skip.data(), probe_skip_.get(), skip.size(), cudaMemcpyDeviceToHost));
  VLM_CUDA_CHECK(cudaMemcpy(mass.data(), probe_mass_.get(), mass.size() * 4, cudaMemcpyDeviceToHost));
  for (int l = 0; l < num_layers_; ++l) {
    if (!config_->routes_layer(l)) continue;
    for (size_t s = 0; s < S; ++s) {
      if (stores_[s] == nullptr || stores_[s]->probe == nullptr) continue;
      SinkRoutedRow row;
      row.layer = l;
      row.num_heads = H_;
      const size_t g0 = (static_cast<size_t>(l) * S + s) * Hkv_;
      row.scores = scores.data() + g0;
      row.skip = skip.data() + g0;
      row.tau = config_->threshold(ctx_[s]);
      row.context_len = ctx_[s];
      row.head_mass = mass.data() + (static_cast<size_t>(l) * S + s) * H_;
      stores_[s]->probe->on_routed_row(row);
    }
  }
}

void CudaSinkRouterStep::settle() {
  if (!pending_) return;
  pending_ = false;
  if (probing_) report_probes();
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
