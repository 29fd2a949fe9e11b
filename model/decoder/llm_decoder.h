// LlmDecoder: LlamaForCausalLM / Qwen2ForCausalLM on the CPU, matching Hugging Face
// transformers (f32 compute over weights kept in their stored dtype): the checkpoint, its config
// and the architecture (model/arch/llama_decoder.h) over the CPU layers (model/layers/cpu/).
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

class LlmDecoder {
 public:
  // Loads DIR/config.json and the safetensors weights. Throws LoadError naming the file and the
  // tensor for a missing tensor, a shape mismatch, an unknown dtype, a truncated file or an
  // unsupported architecture. options.format == Dummy: the weights made from config.json
  // (WeightStore::dummy).
  static std::unique_ptr<LlmDecoder> load(const std::string& model_dir, const WeightLoadOptions& options = {});
  // With tp.size > 1: rank tp.rank's shard (model/arch/llama_decoder.h; LoadError when the shapes
  // do not split); its KV cache then has shard().kv_heads heads (kv_config()).
  // Over a streaming dummy store (WeightStore::streaming: a GPU backend's source) no CPU layers
  // are built (their views would be dropped): forward() then throws InternalError.
  LlmDecoder(ModelConfig config, WeightStore weights, DecoderWeightNames names = {}, TensorParallel tp = {});
  ~LlmDecoder();

  const ModelConfig& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }
  const DecoderWeightNames& names() const { return names_; }  // where the decoder's tensors are
  const DecoderShard& shard() const { return arch_->shard(); }
  // The config as this rank's KV cache sees it: num_kv_heads = shard().kv_heads (the config
  // itself when not tensor-parallel).
  ModelConfig kv_config() const;
  // The dtype of the layers' matrix weights (the checkpoint's dtype; what --dtype auto runs).
  DType weight_dtype() const { return weight_dtype_; }

  // Runs every layer over the batch: writes each token's K/V to its slot of kv_layers[l], and
  // returns the logits of the rows batch.logits_indices as logits[L, V] (resized).
  // Preconditions: kv_layers.size() == num_layers, each with num_kv_heads and head_dim of the
  // config; every token id < vocab_size (throws InternalError otherwise), except rows taken
  // from `override`, whose ids are not looked up.
  void forward(const ForwardBatch& batch, std::span<const PagedKVLayer> kv_layers,
               std::vector<float>& logits, const EmbeddingOverride& override = {}) const;

 private:
  ModelConfig config_;
  WeightStore weights_;
  DecoderWeightNames names_;
  DType weight_dtype_ = DType::F32;
  std::unique_ptr<LayerBackend> backend_;  // CpuLayers
  std::unique_ptr<LlamaDecoder> arch_;     // over weights_ (declared after it)
};

}  // namespace vlm
