// CudaSinkRouterStep: SinkRouter's part of the CudaDecoder (the CPU's SinkRouterAttention, on the
// GPU) for a batch that carries anchor stores (ForwardBatch::sink_anchors).
//  - Routed rows: a sequence with a store whose row this step is a decode row (one token, not
//    finishing prefill), in an all-decode step on the tensor-core/f32 decode kernel (head size 64
//    or 128), on layers >= num_dense_layers. Per such layer one launch routes the groups on the
//    device (kernels/cuda/sink_router's sink_route_from_cache: the anchors are slot 0 of each
//    sequence's first block, the first token's K/V, the CPU's captured anchor while nothing
//    rewrites that slot; LOOK-M's compaction does rewrite it, so with both methods on a request
//    the GPU routes on the compacted first entry where the CPU uses the token captured before
//    compaction), and paged_decode_attention skips the sink groups. Nothing goes to the host
//    between these launches, and their shapes do not depend on any decision: CudaDecoder captures
//    such steps in its decode graphs (cuda_decoder_graphs.cpp), the routed flags in the graph's
//    metadata, the config's tau(L) baked into the graph (its key).
//  - Every other row runs the exact kernel (decode rows of a step that mixes in prefill chunks run
//    exact on the GPU; the CPU routes them).
//  - Counters: each routed sequence's skip count accumulates on the device; after the step end()
//    enqueues one copy of them to pinned memory, and settle() (after the stream synchronized:
//    CudaBackend::sample) adds them to the stores and ForwardBatch::sink_counters, as the CPU does.
//  - Calibration probes (SinkAnchors::probe, vlm-calibrate-sink --device cuda): a step with one
//    runs eagerly and keeps every routed layer's scores, decisions and each head's first-token
//    attention mass (measured on the device, kernels/cuda/sink_router); settle() downloads them
//    and calls the probe once per routed (row, layer), as the CPU's SinkRouterAttention does.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class CudaSinkRouterStep {
 public:
  // The host part of a step: which rows route, their flags written to flags[seqs] (0 past the
  // batch's sequences: graph padding), the device buffers sized for `seqs` rows. all_decode:
  // every sequence has one row; fast: the decode kernel runs (head size 64/128, G <= 16).
  // Returns whether any row routes.
  bool plan(const ForwardBatch& batch, bool all_decode, bool fast, int num_layers, int num_kv_heads, int head_dim,
            DType kv_dtype, int64_t seqs, uint8_t* flags /*[seqs] host*/);
  // Bumped whenever a device buffer moved (graphs that captured route_layer hold the old pointers).
  int64_t epoch() const { return epoch_; }
  // Enqueues the step's start: zeroes the counts; the routed flags are at d_flags ([seqs] u8 on the
  // device; a graph's own metadata, or the eager step's upload).
  void start(const uint8_t* d_flags, cudaStream_t stream);
  // An eager step: plan() into pinned memory, the flags' upload and start(); returns plan()'s result.
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
  const SinkRouterConfig* config_ = nullptr;
  SinkRouterCounters* counters_ = nullptr;
  std::vector<SinkAnchors*> stores_;  // [S] routed rows' stores, null for the others
  std::vector<int32_t> ctx_;          // [S]
  int Hkv_ = 0, D_ = 0, kv_esz_ = 0, routed_layers_ = 0, num_layers_ = 0, H_ = 0;
  int64_t epoch_ = 0;
  const uint8_t* d_flags_ = nullptr;
  cuda::PinnedBuffer host_;   // routed flags [S] u8 on the way in (eager), counts [S] i32 on the way out
  cuda::DeviceBuffer flags_;  // routed [S] u8 (eager steps)
  cuda::DeviceBuffer counts_, skip_, anchor_v_;
  cuda::DeviceBuffer probe_scores_, probe_skip_, probe_mass_;  // [L, S, Hkv], [L, S, Hkv], [L, S, H]
  void report_probes();  // settle()'s part for probing steps
};

}  // namespace vlm
