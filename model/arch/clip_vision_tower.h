// ClipVisionTower: CLIPVisionModel and SiglipVisionModel (transformers 5.17 modeling_clip,
// modeling_siglip) up to a selected hidden state, written once over the layer vocabulary:
//   embeddings: PatchEmbedding over whole images — the stride-p conv (SigLIP: with a bias), CLIP's
//               class token before each image's patches, learned positions on every row;
//   pre-norm:   CLIP's pre_layrnorm (SigLIP has none); hidden_states[0] is its output;
//   layers:     x += out_proj(attn(q|k|v(ln1 x))), attention within each image (equal segments
//               of L rows); x += fc2(act(fc1(ln2 x))), act quick_gelu (CLIP), gelu_pytorch_tanh
//               (SigLIP) or gelu; hidden_states[l] is the output of layer l;
//   output:     the selected hidden states side by side [rows, Cv * k] (first selected first),
//               CLIP's class row dropped when asked; only the layers up to the deepest run.
// post_layernorm is never read (LLaVA takes a hidden state).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/layers/layer_backend.h"
#include "model/vision/clip_vision.h"

namespace vlm {

// One encoder layer's tensors, names relative to the tower's prefix (the one place they are written).
struct ClipVisionLayerSpec {
  NormSpec ln1, ln2;
  LinearPart q, k, v, o;
  MlpSpec mlp;  // fc1 -> act -> fc2, with ln2 as its pre-norm
};
ClipVisionLayerSpec clip_vision_layer_spec(const ClipVisionConfig& c, int64_t layer);
// The embeddings' tensors (conv, its bias for SigLIP, class token for CLIP, positions).
PatchEmbeddingSpec clip_vision_embedding_spec(const ClipVisionConfig& c);
// CLIP's pre_layrnorm (not read for SigLIP).
NormSpec clip_vision_pre_norm_spec(const ClipVisionConfig& c);

class ClipVisionTower {
 public:
  // `weights`: the tower's tensors ("embeddings.*", "pre_layrnorm.*", "encoder.layers.N.*" under
  // its prefix); layers [0, num_layers) are loaded, so hidden states [0, num_layers) can be asked.
  ClipVisionTower(const ClipVisionConfig& config, LayerBackend& backend, const WeightSource& weights,
                  int64_t num_layers);

  const ClipVisionConfig& config() const { return config_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t tokens_per_image() const { return config_.num_positions(); }  // L
  // The rows of out per image: L, or L - 1 without the class row.
  int64_t out_rows(bool drop_cls) const { return tokens_per_image() - (drop_cls ? 1 : 0); }

  // The activations of a call over N images (N * L rows each); its buffers are indices
  // [0, plan.bufs.size()) — a caller may append its own after them.
  ActivationPlan plan(int64_t N) const;
  // pixels [N, 3*S*S] -> out [N * out_rows(drop_cls), Cv * hidden.size()]: hidden state
  // hidden[j] (in [0, num_layers]) in columns [j*Cv, (j+1)*Cv). InternalError for an index out of
  // range, none, or drop_cls without a class token.
  void forward(Step& s, Act pixels, std::span<const int> hidden, bool drop_cls, Act out) const;

 private:
  struct Layer {
    std::unique_ptr<Linear> qkv, o;  // qkv: 3 parts with ln1
    std::unique_ptr<Mlp> mlp;        // with ln2
  };
  enum Buf { kX, kQkv, kAttn, kInner, kNumBufs };

  ClipVisionConfig config_;
  std::unique_ptr<PatchEmbedding> embed_;
  std::unique_ptr<Norm> pre_norm_;  // CLIP only
  std::unique_ptr<SegmentAttention> attn_;
  std::unique_ptr<RowOps> rows_;
  std::vector<Layer> layers_;
};

}  // namespace vlm
