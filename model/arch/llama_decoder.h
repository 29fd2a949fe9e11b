// LlamaDecoder: the Llama / Qwen2 / Qwen3 decoder (and the decoders of the VLMs built on them)
// written once over the layer vocabulary (model/layers/layers.h); a LayerBackend makes its layers,
// so the same forward runs on every backend. Per layer: x += o(attn(rope(q, k), v)) over the paged
// KV cache (Qwen3: q and k through a per-head RMSNorm first, inside the attention layer), then
// x += mlp(h), each branch after an RMSNorm, the MLP a mixture of experts on the layers the
// config's MoeConfig names (Qwen3-MoE); a final norm and the LM head on the step's logit rows only.
// With config.deepstack_layers = K > 0 (Qwen3-VL), after layer i < K the media rows get plane
// i + 1 of the step's embedding override added (RowOps::add_override_plane).
//
// Tensor parallelism (tp.size = N > 1, issue 42): this object is rank r's shard (DecoderShard):
// its query heads, KV heads and MLP columns (q/k/v, gate/up by rows; o, down by columns, their
// biases on rank 0 only), the embedding replicated, the LM head split by vocabulary when N divides
// it. After o and after down the ranks' residuals are summed (Collective::all_reduce_sum): rank 0
// adds its partial product to the residual, the others write theirs over it, so the sum is the
// residual plus every rank's part, in rank order. The logits are gathered (Collective::gather_cols)
// so every rank holds all [R, V]. With N == 1 nothing of this runs (the same layers and calls).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/decoder/model_config.h"
#include "model/layers/layer_backend.h"
#include "model/layers/tensor_parallel.h"

namespace vlm {

// Checkpoint names of the decoder's tensors: `prefix` + "embed_tokens.weight" / "layers.N...." /
// "norm.weight", and the LM head. Defaults: a plain *ForCausalLM checkpoint. A multimodal
// checkpoint nests the decoder (e.g. LLaVA: "model.language_model." or "language_model.model.").
struct DecoderWeightNames {
  std::string prefix = "model.";
  std::string lm_head = "lm_head.weight";
};

// One decoder layer's tensors as specs, names relative to the decoder's prefix (the one place
// those names are written; a GPU copy of the weights reads them too).
struct LlamaLayerSpec {
  NormSpec input_norm, post_norm;
  LinearPart q, k, v, o;
  std::optional<NormSpec> q_norm, k_norm;  // [D] each, when config.qk_norm (Qwen3)
  MlpSpec mlp;                 // the dense MLP (unused when moe is set)
  std::optional<MoeSpec> moe;  // when config.moe.is_moe_layer(layer): the router "mlp.gate.weight" and
                               // the experts under "mlp.experts."; layout PerExpert until resolved
};
LlamaLayerSpec llama_layer_spec(const ModelConfig& c, int64_t layer);

// How `store` holds the experts of `spec` (names under `prefix`): per-expert tensors, or fused
// gate_up_proj / down_proj read by shape ([E, 2I, C] Fused, [E, C, 2I] FusedTransposed; a shape
// that reads both ways, C == 2I, takes `transposed_when_ambiguous`). Throws LoadError naming the
// tensors looked for when neither is there, or a fused shape that is neither. A dummy store
// (--load-format dummy) holds nothing and makes what is asked: Fused (what transformers 5 saves).
ExpertLayout resolve_expert_layout(const WeightStore& store, const std::string& prefix, const MoeSpec& spec,
                                   bool transposed_when_ambiguous);

// The config's MLP of `layer` must read every checkpoint tensor under "<prefix>layers.<layer>.mlp."
// (checked for models with MoE layers): the router and the experts of `moe` as resolved, or the
// dense MLP of `spec` when `moe` is null. Throws LoadError naming the first tensor it would not read
// (shared experts, a router bias, quantization scales, experts on a layer kept dense).
void check_mlp_tensors(const WeightStore& store, const std::string& prefix, int64_t layer, const LlamaLayerSpec& spec,
                       const MoeSpec* moe);

class LlamaDecoder {
 public:
  // Makes every layer through `backend` from `weights` (LoadError naming a missing or misshapen
  // tensor). The weights must outlive the decoder.
  // With tp.size > 1: rank tp.rank's shard (LoadError when the shapes do not split, naming them;
  // the KV cache this rank's layers write then has shard().kv_heads heads). MoE layers refuse TP.
  LlamaDecoder(const ModelConfig& config, LayerBackend& backend, const WeightStore& weights,
               const DecoderWeightNames& names = {}, const TensorParallel& tp = {});
  const DecoderShard& shard() const { return shard_; }

  // The activations forward() asks the step for.
  const ActivationPlan& plan() const { return plan_; }
  // Embeds the step's tokens (and media rows), runs every layer (K/V into the cache, the methods
  // in attention) and writes the logits of the step's logit rows, [R, V] f32.
  void forward(Step& s) const;

 private:
  struct Block {
    std::unique_ptr<Linear> qkv, o;  // qkv with the input norm
    std::unique_ptr<CausalAttention> attn;
    std::unique_ptr<Mlp> mlp;        // with the post-attention norm
  };
  enum Buf { kResidual, kQkv, kInner, kLocalLogits, kGathered, kNumBufs };  // the last two: vocab-split TP only

  int64_t vocab_ = 0;
  ActivationPlan plan_;
  std::unique_ptr<Embedding> embed_;
  std::unique_ptr<RopeTable> rope_;
  std::vector<Block> blocks_;
  std::unique_ptr<Linear> head_;  // with the final norm
  int64_t deepstack_ = 0;         // K
  std::unique_ptr<RowOps> rows_;  // the DeepStack adds (K > 0)
  TensorParallel tp_;
  DecoderShard shard_;
  std::unique_ptr<ShardedWeightSource> sharded_;  // TP: o and down's column copies (the layers may view them)
  std::unique_ptr<Collective> coll_;              // TP only
};

}  // namespace vlm
