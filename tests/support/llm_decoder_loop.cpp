#include "tests/support/llm_decoder_loop.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/paged_attention.h"
#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "model/decoder/attention_layer.h"

namespace vlm::testing {

namespace {
const float* f32_or_null(const TensorView& t) { return t.empty() ? nullptr : t.as<const float>(); }
}  // namespace

void llm_decoder_loop(const LlmDecoder& d, const ForwardBatch& batch, std::span<const PagedKVLayer> kv_layers,
                      std::vector<float>& logits, const EmbeddingOverride& override) {
  const ModelConfig& c = d.config();
  const RotaryEmbedding rope_(c.rope);
  const AttentionLayer attention_;
  const TensorView& embed_ = d.embed_weight();
  const TensorView& final_norm_ = d.final_norm_weight();
  const TensorView& lm_head_ = d.lm_head_weight();
  const int64_t T = batch.num_tokens();
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
  VLM_CHECK(static_cast<int64_t>(kv_layers.size()) == c.num_layers, "{} KV layers for {} decoder layers",
            kv_layers.size(), c.num_layers);
  VLM_CHECK(T > 0, "empty batch");
  VLM_CHECK(static_cast<int64_t>(batch.positions.size()) == T &&
                static_cast<int64_t>(batch.slot_mapping.size()) == T,
            "batch arrays disagree on the token count {}", T);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  Tensor x = Tensor::empty({T, C});     // residual stream [T, C]
  Tensor h = Tensor::empty({T, C});     // normed input / branch output [T, C]
  Tensor q = Tensor::empty({T, H * D});
  Tensor k = Tensor::empty({T, Hkv * D});
  Tensor v = Tensor::empty({T, Hkv * D});
  Tensor attn = Tensor::empty({T, H * D});
  Tensor gate = Tensor::empty({T, I});
  Tensor up = Tensor::empty({T, I});
  float* xp = x.as<float>();
  float* hp = h.as<float>();
  // cos/sin of every token's position, computed once for all layers.
  Tensor rope_table = Tensor::empty({T, std::max<int64_t>(rope_.inv_freq().size() * 2, 1)});
  if (!batch.mrope_positions.empty()) {
    VLM_CHECK(static_cast<int64_t>(batch.mrope_positions.size()) == 3 * T, "{} M-RoPE positions for {} tokens",
              batch.mrope_positions.size(), T);
    rope_.cos_sin_table_mrope(batch.mrope_positions.data(), T, rope_table.as<float>());
  } else {
    rope_.cos_sin_table(batch.positions.data(), T, rope_table.as<float>());
  }

  VLM_CHECK(override.num_device_runs == 0, "device-memory media rows given to the CPU decoder");
  if (override.use == nullptr) {
    embedding_lookup(embed_, batch.token_ids.data(), T, xp);
  } else {
    VLM_CHECK(override.embeds != nullptr, "embedding override without embeddings");
    std::vector<int32_t> ids(batch.token_ids);  // overridden rows look up row 0, then get replaced
    for (int64_t t = 0; t < T; ++t)
      if (override.use[t]) ids[t] = 0;
    embedding_lookup(embed_, ids.data(), T, xp);
    for (int64_t t = 0; t < T; ++t)
      if (override.use[t]) std::copy(override.embeds + t * C, override.embeds + (t + 1) * C, xp + t * C);
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DecoderLayerWeights& L = d.layer_weights(l);
    const PagedKVLayer& kv = kv_layers[l];
    VLM_CHECK(kv.num_kv_heads == Hkv && kv.head_dim == D, "KV layer {} is {}x{}, model needs {}x{}", l,
              kv.num_kv_heads, kv.head_dim, Hkv, D);
    // Attention branch.
    rms_norm(xp, L.input_norm, eps, T, hp);
    const LinearTarget qkv[] = {{&L.q, f32_or_null(L.q_bias), q.as<float>()},
                                {&L.k, f32_or_null(L.k_bias), k.as<float>()},
                                {&L.v, f32_or_null(L.v_bias), v.as<float>()}};
    linear_multi(hp, T, qkv);  // one pass over h for q, k and v
    rope_.apply_cached(q.as<float>(), H, k.as<float>(), Hkv, rope_table.as<float>(), T);
    attention_.forward(static_cast<int>(l), q.as<float>(), k.as<float>(), v.as<float>(), static_cast<int>(H), kv, batch,
                       scale, attn.as<float>());
    linear(attn.as<float>(), T, L.o, f32_or_null(L.o_bias), hp);
    add_inplace(xp, hp, T * C);
    // MLP branch.
    rms_norm(xp, L.post_norm, eps, T, hp);
    const LinearTarget gate_up[] = {{&L.gate, f32_or_null(L.gate_bias), gate.as<float>()},
                                    {&L.up, f32_or_null(L.up_bias), up.as<float>()}};
    linear_multi(hp, T, gate_up);
    silu_mul(gate.as<float>(), up.as<float>(), T, I, gate.as<float>());
    linear(gate.as<float>(), T, L.down, f32_or_null(L.down_bias), hp);
    add_inplace(xp, hp, T * C);
  }

  // Final norm and LM head, only for the rows that need logits.
  const auto num_out = static_cast<int64_t>(batch.logits_indices.size());
  logits.resize(static_cast<size_t>(num_out * V));
  if (num_out == 0) return;
  Tensor sel = Tensor::empty({num_out, C});
  for (int64_t r = 0; r < num_out; ++r) {
    const int32_t row = batch.logits_indices[r];
    VLM_CHECK(row >= 0 && row < T, "logits index {} outside the batch of {}", row, T);
    std::copy(xp + row * C, xp + (row + 1) * C, sel.as<float>() + r * C);
  }
  rms_norm(sel.as<float>(), final_norm_, eps, num_out, sel.as<float>());
  linear(sel.as<float>(), num_out, lm_head_, nullptr, logits.data());
}

}  // namespace vlm::testing
