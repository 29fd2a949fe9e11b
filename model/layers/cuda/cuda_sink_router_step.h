// CudaSinkRouterStep: SinkRouter's part of the CudaDecoder (the CPU's SinkRouterAttention, on the
// GPU) for a batch that carries anchor stores (ForwardBatch::sink_anchors).
//  - Anchors: in the (eager) step that finishes a sequence's prefill, after the last layer and
//    before any LOOK-M compaction (capture()), every layer's first-token K/V is copied from the
//    cache into a device array owned by the store (SinkAnchors::device_kv), as the CPU's
//    SinkRouterAttention captures its anchors; so with both methods on a request both route on the
//    first token's K/V from before the compaction.
//  - Routed rows: a sequence with a store holding captured anchors whose row this step is a decode
//    row (one token, not finishing prefill), in an all-decode step on the tensor-core/f32 decode
//    kernel (head size 64 or 128), on layers >= num_dense_layers. Per such layer one launch routes
//    the groups on the device (kernels/cuda/sink_router's sink_route_from_stores, reading each
//    row's anchors through a per-step device array of the stores' pointers), and
//    paged_decode_attention skips the sink groups. Nothing goes to the host between these
//    launches, and their shapes do not depend on any decision: CudaDecoder captures such steps in
//    its decode graphs (cuda_decoder_graphs.cpp), the routed flags and the anchor pointers in the
//    graph's metadata (uploaded at every replay), the config's tau(L) baked into the graph (its key).
//  - Every other row runs the exact kernel (decode rows of a step that mixes in prefill chunks run
//    exact on the GPU; the CPU routes them).
//  - Counters: each routed sequence's skip count accumulates on the device; after the step end()
//    enqueues one copy of them to pinned memory, and settle() (after the stream synchronized:
//    CudaBackend::sample) adds them to the stores and ForwardBatch::sink_counters, as the CPU does.
//  - Calibration probes (SinkAnchors::probe, vlm-calibrate-sink --device cuda): a step with one
//    runs eagerly and keeps every routed layer's scores, decisions and each head's first-token
//    attention mass (measured on the device, kernels/cuda/sink_router); settle() downloads them
//    and calls the probe once per routed (row, layer), as the CPU's SinkRouterAttention does.
//  - Tensor parallelism (issue 42, set_rank): each rank routes its own KV groups (its KV heads
//    split, not replicated: a group's query heads on one rank), each with its own group's anchor
//    and the threshold tau(L), which is the same for every group: no communication. A store's
//    device anchors hold one array per rank (on its GPU, its KV heads'); CudaBackend gives the
//    stores that finish prefill a fresh set before the ranks run (prepare()). Each rank's counts
//    cover its groups; the backend settles every rank's on one thread, so the sums are one GPU's.
//    Calibration probes are refused (InternalError) there: they run on one GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class CudaSinkRouterStep {
 public:
  // Tensor parallelism: this decoder is rank `rank` of `ranks` (default 0 of 1). Set once.
  void set_rank(int rank, int ranks) {
    rank_ = rank;
    ranks_ = ranks;
  }
  // Tensor parallelism, before the ranks run a step (one thread): every store of b whose prefill
  // the step finishes gets a fresh set of `ranks` device anchor arrays, which capture() fills, each
  // rank its own (a store's earlier set, possibly shared with forked choices, is let go).
  static void prepare(const ForwardBatch& b, int ranks);
  bool pending() const { return pending_; }  // end() enqueued counts that settle() has not added
  // Captures the anchors of the sequences whose prefill this step finishes (kv: every layer;
  // block_tables: the batch's on the device, max_blocks_per_seq wide). An eager step's, after its
  // last layer and before LOOK-M's compaction. Each such store gets a fresh array from this
  // step's pool (its previous one, possibly shared with forked choices, goes back when its last
  // holder lets it go).
  void capture(const ForwardBatch& batch, const std::vector<PagedKVLayer>& kv, const int32_t* block_tables,
               cudaStream_t stream);
  // Whether `batch` has a sequence whose anchors capture() would take (such a step runs eagerly).
  static bool captures(const ForwardBatch& batch);
  // The host part of a step: which rows route, their flags written to flags[seqs] and their stores'
  // device anchors to anchors[seqs] (0 / null past the batch's sequences: graph padding, and for rows
  // that do not route), the device buffers sized for `seqs` rows. all_decode:
  // every sequence has one row; fast: the decode kernel runs (head size 64/128, G <= 16).
  // Returns whether any row routes.
  bool plan(const ForwardBatch& batch, bool all_decode, bool fast, int num_layers, int num_kv_heads, int head_dim,
            DType kv_dtype, int64_t seqs, uint8_t* flags /*[seqs] host*/, const float** anchors /*[seqs] host*/);
  // Bumped whenever a device buffer moved (graphs that captured route_layer hold the old pointers).
  int64_t epoch() const { return epoch_; }
  // Enqueues the step's start: zeroes the counts; the routed flags are at d_flags ([seqs] u8 on the
  // device) and the anchor pointers at d_anchors ([seqs] on the device): a graph's own metadata, or
  // the eager step's upload.
  void start(const uint8_t* d_flags, const float* const* d_anchors, cudaStream_t stream);
  // An eager step: plan() into pinned memory, the upload and start(); returns plan()'s result.
  bool begin(const ForwardBatch& batch, bool all_decode, bool fast, int num_layers, int num_kv_heads, int head_dim,
             DType kv_dtype, cudaStream_t stream);
  bool active() const { return active_; }
  bool probing() const { return probing_; }  // some routed row has a calibration probe (eager only)
  // Layer `layer`'s routing for the decode kernel: when the step routes and the layer is routed,
  // enqueues the routing kernel and points meta.group_skip (and group_surrogate) at its results;
  // otherwise clears them (exact attention).
  void route_layer(int layer, const void* q /*[S,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                   cuda::CudaAttentionBatch& meta, cudaStream_t stream);
  // Enqueues the copy of the step's skip counts to the host (after the step's work).
  void end(cudaStream_t stream);
  // After the stream synchronized: adds the step's counts to the stores and counters (once).
  void settle();

 private:
  bool active_ = false, pending_ = false, probing_ = false;
  int rank_ = 0, ranks_ = 1;  // set_rank
  const SinkRouterConfig* config_ = nullptr;
  SinkRouterCounters* counters_ = nullptr;
  std::vector<SinkAnchors*> stores_;  // [S] routed rows' stores, null for the others
  std::vector<int32_t> ctx_;          // [S]
  int Hkv_ = 0, D_ = 0, kv_esz_ = 0, routed_layers_ = 0, num_layers_ = 0, H_ = 0;
  int64_t epoch_ = 0;
  const uint8_t* d_flags_ = nullptr;
  const float* const* d_anchors_ = nullptr;
  // In (eager): anchor pointers [S] then routed flags [S] u8; out: counts [S] i32.
  cuda::PinnedBuffer host_;
  cuda::DeviceBuffer flags_;  // the eager steps' pointers and flags, same layout
  cuda::DeviceBuffer counts_, skip_, anchor_v_;
  cuda::DeviceBuffer probe_scores_, probe_skip_, probe_mass_;  // [L, S, Hkv], [L, S, Hkv], [L, S, H]
  void report_probes();  // settle()'s part for probing steps
  struct AnchorPool;
  std::shared_ptr<AnchorPool> pool_;  // the stores' device anchors (cuda_sink_router_step.cpp)
};

}  // namespace vlm
