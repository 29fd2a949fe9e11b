#include "model/decoder/weight_footprint.h"

#include "kernels/core/check.h"
#include "model/arch/llama_decoder.h"

namespace vlm {

DecoderFootprint decoder_footprint(const ModelConfig& c) {
  VLM_CHECK(!c.moe.enabled(), "decoder_footprint of a mixture-of-experts decoder");
  DecoderFootprint f;
  const int64_t C = c.hidden_size, V = c.vocab_size;
  f.other_params += V * C + C;                           // embed_tokens [V, C], final norm [C]
  if (!c.tie_word_embeddings) f.other_params += V * C;  // lm_head [V, C]
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerSpec s = llama_layer_spec(c, l);
    f.other_params += s.input_norm.weight.shape.numel() + s.post_norm.weight.shape.numel();
    if (s.q_norm) f.other_params += s.q_norm->weight.shape.numel() + s.k_norm->weight.shape.numel();
    for (const LinearPart* p : {&s.q, &s.k, &s.v, &s.o, &s.mlp.gate, &s.mlp.up, &s.mlp.down}) {
      f.linear_params += p->weight.shape.numel();
      f.linear_rows += p->weight.shape[0];
      if (!p->bias.empty()) f.other_params += p->weight.shape[0];
    }
  }
  return f;
}

int64_t kv_cache_bytes(const ModelConfig& c, int64_t tokens, int64_t bytes_per_value) {
  return 2 * c.num_layers * c.num_kv_heads * c.head_dim * tokens * bytes_per_value;
}

}  // namespace vlm
