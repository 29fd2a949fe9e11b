// What an architecture asks a LayerBackend for: one spec per layer kind. Specs hold shapes,
// checkpoint names (under the WeightSource's prefix) and options; never a backend's choices.
#pragma once

#include <cstdint>
#include <optional>
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
// q_norm / k_norm (Qwen3; both or neither): a per-head RMSNorm over D of every q and k head,
// weights [D] shared by the heads, applied before RoPE (transformers' Qwen3Attention).
struct AttentionSpec {
  int layer = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  std::optional<NormSpec> q_norm, k_norm;  // weights [D]
  // Tensor parallelism: this rank's heads are the model's query heads [head_begin, + num_heads)
  // of total_heads and KV heads [kv_head_begin, + num_kv_heads) of total_kv_heads (the methods'
  // per-head settings and per-group state are indexed by the model's heads). 0 totals: all heads.
  int64_t head_begin = 0, total_heads = 0, kv_head_begin = 0, total_kv_heads = 0;
  bool qk_norm() const { return q_norm.has_value() || k_norm.has_value(); }
};

enum class MlpKind {
  GatedSilu,  // down(silu(gate x) * up x): Llama, Qwen2, the Qwen2.5-VL tower
  QuickGelu,  // down(quick_gelu(up x)): CLIP, the Qwen2-VL tower
  GeluErf,    // down(gelu(up x)): the Qwen2-VL merger, LLaVA's projector
  GeluTanh,   // down(gelu_tanh(up x)): SigLIP
};

struct MlpSpec {
  MlpKind kind = MlpKind::GatedSilu;
  int64_t hidden = 0, inner = 0;  // C (the input's width), I
  LinearPart gate, up, down;      // [I, C] (gated only), [I, C], [Cout, I]
  std::optional<NormSpec> pre_norm;  // the block's norm before the MLP, when it is the MLP's
};

// How a checkpoint stores a mixture-of-experts block's experts (E experts, C = hidden, I = the
// experts' inner size). Under MoeSpec::experts (e.g. "layers.3.mlp.experts."):
//  - PerExpert: "<e>.gate_proj.weight" [I, C], "<e>.up_proj.weight" [I, C], "<e>.down_proj.weight"
//    [C, I] for e < E (the released Qwen3-MoE checkpoints; what transformers 5 writes for
//    qwen3_moe: save_pretrained reverts its load-time merge);
//  - Fused: "gate_up_proj" [E, 2I, C] (rows [0, I) gate, [I, 2I) up) and "down_proj" [E, C, I]
//    (transformers 5's in-memory Qwen3MoeExperts layout);
//  - FusedTransposed: "gate_up_proj" [E, C, 2I] (columns [0, I) gate) and "down_proj" [E, I, C]
//    (the released Qwen3-VL-MoE checkpoints; transformers 5 transposes them at load).
enum class ExpertLayout { PerExpert, Fused, FusedTransposed };

// A sparse mixture-of-experts block (Qwen3-MoE, Qwen3-VL-MoE's decoder), used as an Mlp:
// logits = h W_router^T [T, E]; p = softmax(logits) in f32 over all E; the top_k largest p per
// token (ties: the lower expert index first); with norm_topk_prob those k weights divided by
// their sum; y (+)= sum over the chosen experts, in increasing expert index, of
// weight * down_e(silu(gate_e h) * up_e h). h = pre_norm(x) when it has one, else x.
struct MoeSpec {
  int64_t hidden = 0, inner = 0;          // C, I (moe_intermediate_size)
  int64_t num_experts = 0, top_k = 0;     // E, k (1 <= k <= E)
  bool norm_topk_prob = false;
  WeightRef router;                       // [E, C] ("mlp.gate.weight")
  std::string experts;                    // name prefix of the experts' tensors ("...mlp.experts.")
  ExpertLayout layout = ExpertLayout::PerExpert;
  std::optional<NormSpec> pre_norm;       // the block's norm before the MLP
};

// Bidirectional attention within segments of rows (a frame, a window, an image): H heads of D.
// The input is the fused q|k|v projection; q and k are rotated first when a rope table is given.
struct SegmentAttentionSpec {
  int64_t num_heads = 0, head_dim = 0;
  float scale = 1.0f;
};

// A ViT's embedding of whole square images (CLIP, SigLIP): the conv of stride = kernel = p over
// `channels` planes of S x S pixels (a linear layer over each unfolded p x p patch, + its bias
// when it has one), then a class token before each image's patches (when given) and a learned
// position added to every row. L = G * G (+ 1 with the class token), G = S / p.
struct PatchEmbeddingSpec {
  int64_t image_size = 0, patch_size = 0, channels = 3;  // S, p
  LinearPart conv;              // weight [C, channels, p, p]; bias [C] or none
  std::string class_embedding;  // [C], or empty: no class token (SigLIP)
  WeightRef positions;          // [L, C]
};

// The 2-D rotary embedding of vision towers (Qwen2-VL): per head, frequencies [0, D/4) rotate by
// the patch's row, [D/4, D/2) by its column (theta over D/2 dims), rotate_half style.
struct VisionRopeSpec {
  int64_t head_dim = 0;
  double theta = 10000.0;
};

// A learned position grid interpolated to each item's patch grid (PositionTable, Qwen3-VL).
struct PositionTableSpec {
  WeightRef table;    // [N*N, C]
  int64_t side = 0;   // N
  int64_t merge = 1;  // rows in merge-block order of merge x merge patches
};

}  // namespace vlm
