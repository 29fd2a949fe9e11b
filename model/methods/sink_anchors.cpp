#include "model/methods/sink_anchors.h"

namespace vlm {

void SinkAnchors::ensure_layer(int layer, int Hkv, int D) {
  if (Hkv != num_kv_heads || D != head_dim) {
    num_layers = 0;
    num_kv_heads = Hkv;
    head_dim = D;
    k.clear();
    v.clear();
    captured.clear();
  }
  if (layer < num_layers) return;
  num_layers = layer + 1;
  const std::size_t n = static_cast<std::size_t>(num_layers) * Hkv * D;
  k.resize(n, 0.0f);
  v.resize(n, 0.0f);
  captured.resize(static_cast<std::size_t>(num_layers), 0);
}

}  // namespace vlm
