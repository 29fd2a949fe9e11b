// Qwen3VLVisionTower: the Qwen3-VL vision tower (transformers 5.17 Qwen3VLVisionModel) written
// once over the layer vocabulary:
//   patch embed: the Conv3d (3 x tp x p x p, stride = kernel, with bias) as a linear layer over
//                the preprocessed patch rows [P, K] (merge-block order, as Qwen2-VL's), plus the
//                learned N x N position grid interpolated to each item's grid (PositionTable);
//   2-D rotary:  VisionRopeTable over each patch's (row, column), as Qwen2-VL's;
//   blocks:      x += proj(attn(rope(qkv(norm1 x)))), x += fc2(gelu_tanh(fc1(norm2 x))), LayerNorm
//                (eps 1e-6), attention within one frame of one item (no windows);
//   merger:      LayerNorm(Cv) over each patch, merge^2 consecutive rows as one row [U, merge^2 Cv],
//                Linear -> GELU (erf) -> Linear to the text width C;
//   DeepStack:   after block deepstack_visual_indexes[k], the rows viewed as [U, merge^2 Cv]
//                first, then LayerNorm(merge^2 Cv), then the same MLP shape: plane k + 1.
// Output: (1 + K) planes of [U, C] one after the other, [(1 + K) * U, C]: plane 0 the merger's,
// plane k + 1 DeepStack merger k's (what the decoder adds to the media rows after layer k).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/families/qwen3_vl_config.h"
#include "model/layers/layer_backend.h"

namespace vlm {

// One block's tensors, names relative to the tower's prefix (the one place they are written).
struct Qwen3VLVisionBlockSpec {
  NormSpec norm1, norm2;
  LinearPart q, k, v, proj;  // q, k, v: row thirds of attn.qkv
  MlpSpec mlp;               // linear_fc1 -> gelu_tanh -> linear_fc2, with norm2
};
Qwen3VLVisionBlockSpec qwen3_vl_vision_block_spec(const Qwen3VLVisionConfig& c, int64_t block);
LinearPart qwen3_vl_vision_patch_spec(const Qwen3VLVisionConfig& c);      // patch_embed.proj (weight, bias)
PositionTableSpec qwen3_vl_vision_position_spec(const Qwen3VLVisionConfig& c);  // pos_embed.weight
// The merger (k < 0: "merger.") or DeepStack merger k ("deepstack_merger_list.k."): its MLP
// (fc1, fc2, and for DeepStack its pre-norm over merge^2 Cv) and, for the merger, its norm over Cv.
MlpSpec qwen3_vl_merger_mlp_spec(const Qwen3VLVisionConfig& c, int64_t k);
NormSpec qwen3_vl_merger_norm_spec(const Qwen3VLVisionConfig& c);

// The host-side layout of a call over items with grids (t, h, w): P patches, U = P / merge^2
// merged units, the frame segments (attention within each), each patch's (row, column) in its
// frame in the rows' merge-block order. Checks t > 0, h and w positive multiples of the merge
// (InternalError otherwise).
struct Qwen3VLVisionLayout {
  int64_t num_patches = 0;          // P
  std::vector<int64_t> frame_cu;    // [frames + 1] cumulative patch counts
  std::vector<int32_t> pos_hw;      // [P, 2]
  std::vector<std::array<int32_t, 3>> grids;
};
Qwen3VLVisionLayout qwen3_vl_vision_layout(const Qwen3VLVisionConfig& c, std::span<const std::array<int32_t, 3>> grids);

class Qwen3VLVisionTower {
 public:
  // `weights`: the tower's tensors ("patch_embed.*", "pos_embed.weight", "blocks.N.*", "merger.*",
  // "deepstack_merger_list.k.*" under its prefix). Throws LoadError naming a missing tensor.
  Qwen3VLVisionTower(const Qwen3VLVisionConfig& config, LayerBackend& backend, const WeightSource& weights);

  const Qwen3VLVisionConfig& config() const { return config_; }
  // The activations of a call over `layout`.
  ActivationPlan plan(const Qwen3VLVisionLayout& layout) const;
  // pixels [P, K] (preprocessed patch rows) -> out [(1 + K) * U, C] (the planes above).
  void forward(Step& s, Act pixels, const Qwen3VLVisionLayout& layout, Act out) const;

 private:
  struct Block {
    std::unique_ptr<Linear> qkv, proj;  // qkv with norm1
    std::unique_ptr<Mlp> mlp;           // with norm2
    int deepstack = -1;                 // index k of the DeepStack merger after this block, or -1
  };
  enum Buf { kX, kH, kQkv, kAttn, kInner, kMergerInner, kNumBufs };

  Qwen3VLVisionConfig config_;
  std::unique_ptr<Linear> patch_;
  std::unique_ptr<PositionTable> positions_;
  std::unique_ptr<VisionRopeTable> rope_;
  std::unique_ptr<SegmentAttention> attn_;
  std::vector<Block> blocks_;
  std::unique_ptr<Norm> merger_norm_;
  std::unique_ptr<Mlp> merger_mlp_;
  std::vector<std::unique_ptr<Mlp>> deepstack_;  // with their norms over merge^2 Cv
};

}  // namespace vlm
