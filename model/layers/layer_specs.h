// What an architecture asks a LayerBackend for: one spec per layer kind. Specs hold shapes,
// checkpoint names (under the WeightSource's prefix) and options; never a backend's choices.
#pragma once

#include <cstdint>
#include <string>

#include "model/layers/weight_source.h"

namespace vlm {

enum class NormKind { Rms, Layer };

struct NormSpec {
  NormKind kind = NormKind::Rms;
  float eps = 1e-6f;
  WeightRef weight;  // [C]
  std::string bias;  // LayerNorm's [C], or empty
};

// One decoder layer's causal attention over the paged KV cache: H query heads, Hkv KV heads of
// D, scale on q·k. The input is the layer's fused q|k|v projection (unrotated); the layer
// rotates q and k, writes K/V into this layer's cache slots and runs the attention methods.
struct AttentionSpec {
  int layer = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
};

enum class MlpKind {
  GatedSilu,  // down(silu(gate x) * up x): Llama, Qwen2
};

struct MlpSpec {
  MlpKind kind = MlpKind::GatedSilu;
  int64_t hidden = 0, inner = 0;  // C, I
  LinearPart gate, up, down;      // [I, C], [I, C], [C, I]
};

}  // namespace vlm
