#include "model/decoder/llm_decoder.h"

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {

std::unique_ptr<LlmDecoder> LlmDecoder::load(const std::string& model_dir) {
  ModelConfig config = ModelConfig::load(model_dir);
  WeightStore weights = WeightStore::open(model_dir);
  return std::make_unique<LlmDecoder>(std::move(config), std::move(weights));
}

LlmDecoder::LlmDecoder(ModelConfig config, WeightStore weights, DecoderWeightNames names)
    : config_(std::move(config)), weights_(std::move(weights)), names_(names) {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, V = c.vocab_size;
  backend_ = std::make_unique<CpuLayers>();
  arch_ = std::make_unique<LlamaDecoder>(c, *backend_, weights_, names);
  // The same tensors by role, for the GPU decoder's upload.
  const WeightSource w(weights_, names.prefix);
  embed_ = w.get("embed_tokens.weight", {V, C});
  final_norm_ = w.get("norm.weight", {C});
  lm_head_ = c.tie_word_embeddings ? embed_ : weights_.get(names.lm_head, {V, C});
  auto f32 = [&](const LinearPart& p) {
    if (p.bias.empty()) return TensorView();
    const TensorView b = w.get(p.bias, {p.weight.shape[0]});
    Tensor f = Tensor::empty(b.shape, DType::F32);  // tiny: an f32 copy the matmuls add directly
    convert_to_f32(b.data, b.dtype, f.as<float>(), b.numel());
    bias_storage_.push_back(std::move(f));
    return bias_storage_.back().view();
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerSpec s = llama_layer_spec(c, l);
    Layer L;
    L.input_norm = w.get(s.input_norm.weight);
    L.post_norm = w.get(s.post_norm.weight);
    L.q = w.get(s.q.weight), L.k = w.get(s.k.weight), L.v = w.get(s.v.weight), L.o = w.get(s.o.weight);
    L.q_bias = f32(s.q), L.k_bias = f32(s.k), L.v_bias = f32(s.v), L.o_bias = f32(s.o);
    if (!s.moe) {  // a MoE layer has no dense MLP (the GPU refuses MoE models: cuda_model_support)
      L.gate = w.get(s.mlp.gate.weight), L.up = w.get(s.mlp.up.weight), L.down = w.get(s.mlp.down.weight);
      L.gate_bias = f32(s.mlp.gate), L.up_bias = f32(s.mlp.up), L.down_bias = f32(s.mlp.down);
    }
    layers_.push_back(L);
  }
  VLM_LOG_INFO("loaded {} ({} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}, {:.1f} MiB of weights)",
               c.architecture, c.num_layers, C, c.num_heads, c.num_kv_heads, c.head_dim, V,
               static_cast<double>(weights_.total_bytes()) / (1 << 20));
}

LlmDecoder::~LlmDecoder() = default;

void LlmDecoder::forward(const ForwardBatch& batch, std::span<const PagedKVLayer> kv_layers,
                         std::vector<float>& logits, const EmbeddingOverride& override) const {
  VLM_CHECK(static_cast<int64_t>(kv_layers.size()) == config_.num_layers, "{} KV layers for {} decoder layers",
            kv_layers.size(), config_.num_layers);
  CpuStep step(arch_->plan(), batch, kv_layers, override, logits);
  arch_->forward(step);
}

}  // namespace vlm
