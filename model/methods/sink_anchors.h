// SinkAnchors: one sequence's SinkRouter state (paper §4.1): per decoder layer, the post-RoPE key
// and the value of the sequence's first cached token for every kv head, captured from the paged
// cache at the last prefill chunk (before any KV compression), plus the sequence's routing
// counters. Owned by the engine's Sequence (freed with it, copied to forked choices); the model
// fills and reads it through ForwardBatch::sink_anchors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention/paged_kv.h"

namespace vlm {

// One routed decode row of one layer, as SinkRouterAttention saw it: after the group scores
// and the decision, before attention runs (the cache holds this step's K/V).
struct SinkRoutedRow {
  int layer = 0;
  const float* q = nullptr;       // [H, D] the row's post-RoPE query
  int num_heads = 0;              // H
  const float* scores = nullptr;  // [Hkv] group scores (eq. 12)
  const uint8_t* skip = nullptr;  // [Hkv] 1 = sink group
  double tau = 0;                 // tau(context_len)
  const PagedKVLayer* kv = nullptr;
  const int32_t* block_table = nullptr;  // the sequence's blocks
  int context_len = 0;            // cached tokens, this step's included
  float scale = 0;                // multiplies q·k
  // [H] each head's first-token attention mass when the backend measured it (the GPU decoder:
  // then q, kv and block_table are null); null on the CPU, where the probe computes it.
  const float* head_mass = nullptr;
};

// Observer of a sequence's routed decode rows (vlm-calibrate-sink records scores and the oracle
// first-token mass through it). Called on the step's thread; must not keep the pointers.
class SinkRouterProbe {
 public:
  virtual ~SinkRouterProbe() = default;
  virtual void on_routed_row(const SinkRoutedRow& row) = 0;
};

struct SinkAnchors {
  int num_layers = 0, num_kv_heads = 0, head_dim = 0;
  std::vector<float> k;           // [L, Hkv, D]
  std::vector<float> v;           // [L, Hkv, D]
  std::vector<uint8_t> captured;  // [L] 1 once layer l's anchor is stored
  int64_t groups_routed = 0;      // decode (token, layer, kv group) decisions taken
  int64_t groups_skipped = 0;     // ... of which sink groups (cache not read)
  SinkRouterProbe* probe = nullptr;  // not owned; null except in calibration tools and tests
  // A GPU backend's copy of the anchors, captured at the end of prefill before any compaction:
  // per tensor-parallel rank [2, L, Hkv, D] f32 on its GPU (cuda_sink_router_step.cpp), opaque; null on the
  // CPU. Read-only once captured, so forked choices share it; freed with the last store holding it.
  std::shared_ptr<void> device_kv;

  // Makes room for layer `layer` (keeps the anchors stored so far; clears them all when Hkv or D
  // change, i.e. another model).
  void ensure_layer(int layer, int Hkv, int D);
  bool has(int layer) const {
    return layer >= 0 && layer < num_layers && captured[static_cast<std::size_t>(layer)] != 0;
  }
  float* k_layer(int layer) { return k.data() + static_cast<std::size_t>(layer) * num_kv_heads * head_dim; }
  float* v_layer(int layer) { return v.data() + static_cast<std::size_t>(layer) * num_kv_heads * head_dim; }
  const float* k_layer(int layer) const { return k.data() + static_cast<std::size_t>(layer) * num_kv_heads * head_dim; }
  const float* v_layer(int layer) const { return v.data() + static_cast<std::size_t>(layer) * num_kv_heads * head_dim; }
  double skipped_ratio() const { return groups_routed ? static_cast<double>(groups_skipped) / groups_routed : 0.0; }
};

// Totals over every sequence and layer of the steps that carried this object (engine metrics).
struct SinkRouterCounters {
  int64_t groups_routed = 0;     // decode (token, layer, kv group) decisions on routed layers
  int64_t groups_skipped = 0;    // sink groups among them
  int64_t kv_bytes_skipped = 0;  // K and V bytes of the cache that sink groups did not read
};

}  // namespace vlm
