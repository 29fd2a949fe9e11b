#include "model/decoder/llm_decoder.h"

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {

std::unique_ptr<LlmDecoder> LlmDecoder::load(const std::string& model_dir, const WeightLoadOptions& options) {
  ModelConfig config = ModelConfig::load(model_dir);
  WeightStore weights = WeightStore::open(model_dir, options);
  return std::make_unique<LlmDecoder>(std::move(config), std::move(weights));
}

LlmDecoder::LlmDecoder(ModelConfig config, WeightStore weights, DecoderWeightNames names, TensorParallel tp)
    : config_(std::move(config)), weights_(std::move(weights)), names_(names) {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden_size, V = c.vocab_size;
  backend_ = std::make_unique<CpuLayers>();
  if (weights_.streaming()) {  // a GPU backend's source: no CPU layers, no tensor made yet
    VLM_CHECK(!tp.enabled(), "a streaming dummy store feeds one GPU decoder, not CPU rank {} of {}", tp.rank, tp.size);
    weight_dtype_ = weights_.dummy_weights()->dtype();
    VLM_LOG_INFO("{} ({} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}): dummy weights in {}, made as the GPU "
                 "loads them",
                 c.architecture, c.num_layers, C, c.num_heads, c.num_kv_heads, c.head_dim, V, dtype_name(weight_dtype_));
    return;
  }
  arch_ = std::make_unique<LlamaDecoder>(c, *backend_, weights_, names, tp);
  // The layers' matrix dtype (the first layer's q projection; the embedding's with no layers).
  const WeightSource w(weights_, names.prefix);
  weight_dtype_ = c.num_layers > 0 ? w.get(llama_layer_spec(c, 0).q.weight).dtype : w.get("embed_tokens.weight", {V, C}).dtype;
  VLM_LOG_INFO("loaded {} ({} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}, {:.1f} MiB of weights{})",
               c.architecture, c.num_layers, C, c.num_heads, c.num_kv_heads, c.head_dim, V,
               static_cast<double>(weights_.total_bytes()) / (1 << 20), weights_.dummy_weights() ? ", dummy" : "");
}

LlmDecoder::~LlmDecoder() = default;

ModelConfig LlmDecoder::kv_config() const {
  ModelConfig c = config_;
  if (arch_) c.num_kv_heads = arch_->shard().kv_heads;  // none over a streaming store (one rank: all heads)
  return c;
}

void LlmDecoder::forward(const ForwardBatch& batch, std::span<const PagedKVLayer> kv_layers,
                         std::vector<float>& logits, const EmbeddingOverride& override) const {
  VLM_CHECK(arch_ != nullptr, "no CPU decoder over a streaming dummy store (it feeds a GPU backend only)");
  VLM_CHECK(static_cast<int64_t>(kv_layers.size()) == config_.num_layers, "{} KV layers for {} decoder layers",
            kv_layers.size(), config_.num_layers);
  CpuStep step(arch_->plan(), batch, kv_layers, override, logits);
  arch_->forward(step);
}

}  // namespace vlm
