// LlmDecoder: LlamaForCausalLM / Qwen2ForCausalLM on the CPU, matching Hugging Face
// transformers (f32 compute over weights kept in their stored dtype).
// Per layer: x += o_proj(attn(rope(q, k), v)) over the paged KV cache, then
// x += down(silu(gate(h)) * up(h)), each branch after an RMSNorm; a final norm and the LM head.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/ops/rope.h"
#include "model/decoder/attention_layer.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/model_config.h"
#include "model/decoder/weights.h"

namespace vlm {

// Checkpoint names of the decoder's tensors: `prefix` + "embed_tokens.weight" / "layers.N...." /
// "norm.weight", and the LM head. Defaults: a plain *ForCausalLM checkpoint. A multimodal
// checkpoint nests the decoder (e.g. LLaVA: "model.language_model." or "language_model.model.").
struct DecoderWeightNames {
  std::string prefix = "model.";
  std::string lm_head = "lm_head.weight";
};

// Optional input embeddings for some rows of a batch (e.g. image tokens spliced in by a VLM):
// row t takes embeds[t, :] instead of the token embedding when use[t] != 0. Both null: none.
// A backend may instead hold the media rows in its own memory (the GPU's): device_runs lists
// runs of rows [row, row + n) of the batch taking src[0 .. n) ([n, C] f32 in that memory); only a
// backend that made them reads them (the CPU decoder rejects them).
struct DeviceRowRun {
  int64_t row = 0;
  const float* src = nullptr;
  int64_t n = 0;
};
struct EmbeddingOverride {
  const float* embeds = nullptr;  // [T, C]
  const uint8_t* use = nullptr;   // [T]
  const DeviceRowRun* device_runs = nullptr;
  int64_t num_device_runs = 0;
};

// Media embeddings a backend encoded into its own memory: rows [rows, C] f32 at data (device
// memory), freed with the object.
struct DeviceEmbeddings {
  virtual ~DeviceEmbeddings() = default;
  // Makes rows [begin, end) valid, in stream order before the next forward: a backend may encode
  // a long item's rows on demand, a group of frames at a time (the rest of the object's contract
  // holds for the rows made valid). The default: all rows are valid from the start.
  virtual void ensure_rows(int64_t /*begin*/, int64_t /*end*/) const {}
  const float* data = nullptr;
  int64_t rows = 0;
};

// One decoder layer's weights as views into the checkpoint (biases: f32 copies).
struct DecoderLayerWeights {
  TensorView input_norm;           // [C]
  TensorView q, k, v, o;           // [H*D, C], [Hkv*D, C], [Hkv*D, C], [C, H*D]
  TensorView q_bias, k_bias, v_bias, o_bias;  // empty when the family has none
  TensorView post_norm;            // [C]
  TensorView gate, up, down;       // [I, C], [I, C], [C, I]
  TensorView gate_bias, up_bias, down_bias;
};

class LlmDecoder {
 public:
  // Loads DIR/config.json and the safetensors weights. Throws LoadError naming the file and the
  // tensor for a missing tensor, a shape mismatch, an unknown dtype, a truncated file or an
  // unsupported architecture.
  static std::unique_ptr<LlmDecoder> load(const std::string& model_dir);
  LlmDecoder(ModelConfig config, WeightStore weights, DecoderWeightNames names = {});

  const ModelConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  // The dtype of the layers' matrix weights (the checkpoint's dtype; what --dtype auto runs).
  DType weight_dtype() const { return layers_.empty() ? embed_.dtype : layers_.front().q.dtype; }
  // The weights by role (views valid while the decoder lives), e.g. for a GPU backend's copy.
  const TensorView& embed_weight() const { return embed_; }        // [V, C]
  const TensorView& final_norm_weight() const { return final_norm_; }  // [C]
  const TensorView& lm_head_weight() const { return lm_head_; }    // [V, C] (embed_ when tied)
  const DecoderLayerWeights& layer_weights(int64_t l) const { return layers_[static_cast<size_t>(l)]; }

  // Runs every layer over the batch: writes each token's K/V to its slot of kv_layers[l], and
  // returns the logits of the rows batch.logits_indices as logits[L, V] (resized).
  // Preconditions: kv_layers.size() == num_layers, each with num_kv_heads and head_dim of the
  // config; every token id < vocab_size (throws InternalError otherwise), except rows taken
  // from `override`, whose ids are not looked up.
  void forward(const ForwardBatch& batch, std::span<const PagedKVLayer> kv_layers,
               std::vector<float>& logits, const EmbeddingOverride& override = {}) const;

 private:
  using Layer = DecoderLayerWeights;

  ModelConfig config_;
  WeightStore weights_;
  RotaryEmbedding rope_;
  AttentionLayer attention_;  // the per-layer attention methods
  TensorView embed_;       // [V, C]
  TensorView final_norm_;  // [C]
  TensorView lm_head_;     // [V, C] (embed_ when tied)
  std::vector<Layer> layers_;
  std::vector<Tensor> bias_storage_;  // f32 copies of the biases
};

}  // namespace vlm
