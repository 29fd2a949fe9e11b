// LlmDecoder: LlamaForCausalLM / Qwen2ForCausalLM on the CPU, matching Hugging Face
// transformers (f32 compute over weights kept in their stored dtype): the checkpoint, its config
// and the architecture (model/arch/llama_decoder.h) over the CPU layers (model/layers/cpu/).
// It also hands the weights by role to the GPU decoder, which still uploads them itself.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "model/arch/llama_decoder.h"
#include "model/decoder/embedding_override.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/model_config.h"
#include "model/decoder/weights.h"
#include "model/layers/layer_backend.h"

namespace vlm {

// One decoder layer's weights as views into the checkpoint (biases: f32 copies), for the GPU
// decoder's upload; names from llama_layer_spec().
struct DecoderLayerWeights {
  TensorView input_norm;           // [C]
  TensorView q, k, v, o;           // [H*D, C], [Hkv*D, C], [Hkv*D, C], [C, H*D]
  TensorView q_bias, k_bias, v_bias, o_bias;  // empty when the family has none
  TensorView post_norm;            // [C]
  TensorView gate, up, down;       // [I, C], [I, C], [C, I]; empty on a mixture-of-experts layer
  TensorView gate_bias, up_bias, down_bias;
};

class LlmDecoder {
 public:
  // Loads DIR/config.json and the safetensors weights. Throws LoadError naming the file and the
  // tensor for a missing tensor, a shape mismatch, an unknown dtype, a truncated file or an
  // unsupported architecture.
  static std::unique_ptr<LlmDecoder> load(const std::string& model_dir);
  LlmDecoder(ModelConfig config, WeightStore weights, DecoderWeightNames names = {});
  ~LlmDecoder();

  const ModelConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  const DecoderWeightNames& names() const { return names_; }  // where the decoder's tensors are
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
  DecoderWeightNames names_;
  TensorView embed_;       // [V, C]
  TensorView final_norm_;  // [C]
  TensorView lm_head_;     // [V, C] (embed_ when tied)
  std::vector<Layer> layers_;
  std::vector<Tensor> bias_storage_;  // f32 copies of the biases
  std::unique_ptr<LayerBackend> backend_;  // CpuLayers
  std::unique_ptr<LlamaDecoder> arch_;     // over weights_ (declared after it)
};

}  // namespace vlm
