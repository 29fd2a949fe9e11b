// CudaSinkRouterStep: SinkRouter's part of the CudaDecoder (the CPU's SinkRouterAttention, on the
// GPU) for a batch that carries anchor stores (ForwardBatch::sink_anchors).
//  - Routed rows: a sequence with a store whose row this step is a decode row (one token, not
//    finishing prefill), in an all-decode step on the tensor-core/f32 decode kernel (head size 64
//    or 128), on layers >= num_dense_layers. Per such layer: the anchors (slot 0 of each
//    sequence's first block: the first token's K/V, the CPU's captured anchor while nothing
//    rewrites that slot; LOOK-M's compaction does rewrite it, so with both methods on a request
//    the GPU routes on the compacted first entry where the CPU uses the token captured before
//    compaction: branch cuda-methods-anchors captures them per store instead, not yet run on a
//    GPU) are gathered, the groups routed on the device (kernels/cuda/sink_router),
//    and paged_decode_attention skips the sink groups. Nothing goes to the host between these
//    launches, and their shapes do not depend on any decision (CUDA-graph capturable).
//  - Every other row runs the exact kernel (decode rows of a step that mixes in prefill chunks run
//    exact on the GPU; the CPU routes them).
//  - Counters: each routed sequence's skip count accumulates on the device; the step's end
//    enqueues one copy of them to pinned memory, and settle() (after the stream synchronized:
//    CudaBackend::sample) adds them to the stores and ForwardBatch::sink_counters, as the CPU does.
// Calibration probes (SinkAnchors::probe) are not supported here (InternalError): calibrate on the CPU.
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
  // Prepares the step: uploads the routed flags and zeroes the device counters when some row is
  // routed (returns whether any is). all_decode: every sequence has one row; fast: the decode
  // kernel runs (head size 64/128, G <= 16).
  bool begin(const ForwardBatch& batch, bool all_decode, bool fast, int num_kv_heads, int head_dim, DType kv_dtype,
             cudaStream_t stream);
  // Layer `layer`'s routing for the decode kernel: when the step routes and the layer is routed,
  // enqueues the anchor gather and the routing kernel and points meta.group_skip (and
  // group_surrogate) at the results; otherwise clears them (exact attention).
  void route_layer(int layer, const void* q /*[S,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                   cuda::CudaAttentionBatch& meta, cudaStream_t stream);
  // Enqueues the copy of the step's skip counts to the host.
  void end(cudaStream_t stream);
  // After the stream synchronized: adds the step's counts to the stores and counters (once).
  void settle();

 private:
  bool active_ = false, pending_ = false;
  const SinkRouterConfig* config_ = nullptr;
  SinkRouterCounters* counters_ = nullptr;
  std::vector<SinkAnchors*> stores_;  // [S] routed rows' stores, null for the others
  std::vector<int32_t> ctx_;          // [S]
  int Hkv_ = 0, D_ = 0, kv_esz_ = 0, routed_layers_ = 0;
  cuda::PinnedBuffer host_;   // routed flags [S] u8 on the way in, counts [S] i32 on the way out
  cuda::DeviceBuffer flags_;  // routed [S] u8
  cuda::DeviceBuffer counts_, skip_, anchor_k_, anchor_v_;
};

}  // namespace vlm
