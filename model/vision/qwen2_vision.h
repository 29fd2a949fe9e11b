// The Qwen2-VL / Qwen2.5-VL vision tower (transformers 5.17 Qwen2VisionTransformerPretrainedModel,
// Qwen2_5_VisionTransformerPretrainedModel) on the CPU, f32 compute over stored weights:
//   patch embed: the Conv3d (3 x tp x 14 x 14, stride = kernel, no bias) as a GEMM over the
//                preprocessed patch rows [P, K];
//   2-D rotary:  per head, frequencies [0, D/4) rotate by the patch row, [D/4, D/2) by the patch
//                column (theta 10000 over D/2 dims), rotate_half style;
//   blocks:      x += proj(attn(rope(qkv(norm1 x)))), x += mlp(norm2 x). Qwen2-VL: LayerNorm,
//                fc1 -> quick_gelu -> fc2. Qwen2.5-VL: RMSNorm, down(silu(gate) * up).
//                Attention is bidirectional within one frame (t slice) of one item; Qwen2.5-VL
//                blocks outside fullatt_block_indexes attend within windows of
//                window_size / patch_size patches (rows reordered window by window, restored
//                after the merger);
//   merger:      norm (LayerNorm / RMSNorm) over each patch, 2x2 groups of consecutive rows
//                concatenated, Linear -> GELU (erf) -> Linear to the text width.
#pragma once

#include <array>
#include <memory>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/ops/rope.h"
#include "kernels/core/tensor.h"
#include "model/layers/weight_source.h"
#include "model/vision/clip_vision.h"  // WeightLookup

namespace vlm {

class LayerBackend;
class Qwen2VisionTower;

struct Qwen2VisionConfig {
  bool qwen25 = false;              // Qwen2.5-VL variant (RMSNorm, SwiGLU, window attention)
  int64_t hidden_size = 1280;       // Cv (Qwen2-VL: embed_dim)
  int64_t intermediate_size = 5120; // Iv (Qwen2-VL: embed_dim * mlp_ratio)
  int64_t out_hidden_size = 3584;   // C, the merger's output (Qwen2-VL: hidden_size)
  int64_t depth = 32;
  int64_t num_heads = 16;
  int patch_size = 14;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  int64_t window_size = 112;              // Qwen2.5-VL, pixels
  std::vector<int> fullatt_block_indexes; // Qwen2.5-VL
  double tokens_per_second = 2.0;         // Qwen2.5-VL (video temporal positions)
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_dim() const { return 3LL * temporal_patch_size * patch_size * patch_size; }

  // vision_config of a Qwen2VLConfig (qwen25 = false) or Qwen2_5_VLConfig. Throws LoadError
  // naming `source` for an unsupported activation or inconsistent sizes.
  static Qwen2VisionConfig from_json(const nlohmann::json& j, bool qwen25, const std::string& source);
};

// The host-side layout of one encoder call over items with grids[N] (P patches, U = P / merge^2
// merged units): the order the blocks run the units in (Qwen2.5-VL: window by window, else the
// prompt order), the segments of full attention (one per frame) and of window attention (one per
// window, Qwen2.5-VL) in patches of that order, and each patch's (row, column) in its frame, in
// that order too (the 2-D rotary positions).
struct Qwen2VisionLayout {
  int64_t num_patches = 0;                 // P
  std::vector<int64_t> order;              // [U]: unit j of the run order is unit order[j] of the prompt
  std::vector<int64_t> frame_cu, window_cu;  // cumulative patch counts, [frames + 1], [windows + 1]
  std::vector<int32_t> pos_hw;             // [P, 2] in run order
};

class Qwen2VisionEncoder {
 public:
  struct Block {
    TensorView norm1_w, norm1_b, norm2_w, norm2_b;  // [Cv] (biases: Qwen2-VL only)
    TensorView qkv, qkv_b, proj, proj_b;            // [3Cv, Cv], [3Cv], [Cv, Cv], [Cv]
    TensorView fc1, fc1_b, fc2, fc2_b;              // Qwen2-VL: [Iv, Cv], [Iv], [Cv, Iv], [Cv]
    TensorView gate, gate_b, up, up_b, down, down_b;  // Qwen2.5-VL
  };
  struct Merger {
    TensorView norm_w, norm_b;  // [Cv] (bias: Qwen2-VL only)
    TensorView mlp0, mlp0_b;    // [4Cv, 4Cv], [4Cv]
    TensorView mlp2, mlp2_b;    // [C, 4Cv], [C]
  };

  // Loads `prefix` + "patch_embed.*", "blocks.N.*", "merger.*".
  Qwen2VisionEncoder(const Qwen2VisionConfig& config, const WeightLookup& weights, const std::string& prefix);
  ~Qwen2VisionEncoder();
  const Qwen2VisionConfig& config() const { return config_; }

  // pixels[P, K] of items with grids[N] (P = sum t*h*w) -> out[P / merge^2, C], item by item.
  void encode(const float* pixels, std::span<const std::array<int32_t, 3>> grids, float* out) const;

  // The layout of a call over `grids` (checks each grid: t > 0, h and w multiples of the merge).
  Qwen2VisionLayout layout(std::span<const std::array<int32_t, 3>> grids) const;
  // Whether block l attends over whole frames (else within windows: Qwen2.5-VL).
  bool full_attention(int64_t l) const;

  // The weights, for a copy on another device (model/vision/cuda).
  const TensorView& patch_weight() const { return patch_w_; }  // [Cv, K]
  const std::vector<Block>& blocks() const { return blocks_; }
  Merger merger() const { return {merge_norm_w_, merge_norm_b_, mlp0_, mlp0_b_, mlp2_, mlp2_b_}; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [D / 4]
  // The tower's tensors under their prefix (another backend builds the tower from them).
  const WeightSource& weights() const { return source_; }

 private:
  TensorView f32(const TensorView& t);

  Qwen2VisionConfig config_;
  WeightSource source_;
  TensorView patch_w_;  // [Cv, K]
  std::vector<Block> blocks_;
  TensorView merge_norm_w_, merge_norm_b_, mlp0_, mlp0_b_, mlp2_, mlp2_b_;  // [Cv], [4Cv,4Cv], [C,4Cv]
  std::vector<float> inv_freq_; // [D / 4]
  std::vector<Tensor> storage_; // f32 copies of biases and norms
  std::unique_ptr<LayerBackend> layers_;     // CpuLayers
  std::unique_ptr<Qwen2VisionTower> tower_;  // the forward (model/arch/qwen2_vision_tower.h)
};

}  // namespace vlm
