// Qwen2VisionTower: the Qwen2-VL / Qwen2.5-VL vision tower (transformers 5.17
// Qwen2VisionTransformerPretrainedModel, Qwen2_5_VisionTransformerPretrainedModel) written once
// over the layer vocabulary:
//   patch embed: the preprocessed patch rows [P, K] into the run order (units of merge^2
//                patches; Qwen2.5-VL: window by window), then the Conv3d (3 x tp x p x p, stride =
//                kernel, no bias) as a linear layer over them (the GPU's pixel rows arrive in the
//                compute dtype or f32, and this gather rounds them to the layer's input);
//   2-D rotary:  VisionRopeTable over each patch's (row, column);
//   blocks:      x += proj(attn(rope(qkv(norm1 x)))), x += mlp(norm2 x). Qwen2-VL: LayerNorm,
//                fc1 -> quick_gelu -> fc2. Qwen2.5-VL: RMSNorm, down(silu(gate) * up). Attention
//                within one frame of one item, or within a window (Qwen2.5-VL blocks outside
//                fullatt_block_indexes);
//   merger:      norm over each patch, merge^2 consecutive rows as one row [U, merge^2 Cv],
//                Linear -> GELU (erf) -> Linear to the text width, then back to the prompt order.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/layer_backend.h"
#include "model/vision/qwen2_vision.h"

namespace vlm {

// One block's tensors, names relative to the tower's prefix (the one place they are written).
struct Qwen2VisionBlockSpec {
  NormSpec norm1, norm2;
  LinearPart q, k, v, proj;  // q, k, v: row thirds of attn.qkv
  MlpSpec mlp;
};
Qwen2VisionBlockSpec qwen2_vision_block_spec(const Qwen2VisionConfig& c, int64_t block);
// The patch embedding's and the merger's tensors.
LinearPart qwen2_vision_patch_spec(const Qwen2VisionConfig& c);
NormSpec qwen2_vision_merger_norm_spec(const Qwen2VisionConfig& c);
MlpSpec qwen2_vision_merger_mlp_spec(const Qwen2VisionConfig& c);

class Qwen2VisionTower {
 public:
  // `weights`: the tower's tensors ("patch_embed.*", "blocks.N.*", "merger.*" under its prefix).
  Qwen2VisionTower(const Qwen2VisionConfig& config, LayerBackend& backend, const WeightSource& weights);

  // The activations of a call over `layout` (its patches and merged units as rows).
  ActivationPlan plan(const Qwen2VisionLayout& layout) const;
  // pixels [P, K] (preprocessed patch rows in prompt order) -> out [U, C] in prompt order.
  void forward(Step& s, Act pixels, const Qwen2VisionLayout& layout, Act out) const;

 private:
  struct Block {
    std::unique_ptr<Linear> qkv, proj;  // qkv with norm1
    std::unique_ptr<Mlp> mlp;           // with norm2
    bool full = true;  // attends over whole frames (else within windows)
  };
  enum Buf { kPatchRows, kX, kH, kQkv, kAttn, kInner, kMergerInner, kMerged, kNumBufs };

  Qwen2VisionConfig config_;
  std::unique_ptr<Linear> patch_;
  std::unique_ptr<VisionRopeTable> rope_;
  std::unique_ptr<SegmentAttention> attn_;
  std::unique_ptr<RowOps> rows_;
  std::vector<Block> blocks_;
  std::unique_ptr<Norm> merger_norm_;
  std::unique_ptr<Mlp> merger_mlp_;
};

}  // namespace vlm
