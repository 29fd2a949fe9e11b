#include "model/arch/llama_decoder.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

LlamaLayerSpec llama_layer_spec(const ModelConfig& c, int64_t layer) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t QD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
  const std::string p = "layers." + std::to_string(layer) + ".";
  auto part = [&](const std::string& name, Shape shape, bool bias) {
    return LinearPart{{p + name + ".weight", shape}, bias ? p + name + ".bias" : std::string()};
  };
  const float eps = static_cast<float>(c.rms_norm_eps);
  LlamaLayerSpec s;
  s.input_norm = {NormKind::Rms, eps, {p + "input_layernorm.weight", {C}}, {}};
  s.post_norm = {NormKind::Rms, eps, {p + "post_attention_layernorm.weight", {C}}, {}};
  s.q = part("self_attn.q_proj", {QD, C}, c.qkv_bias);
  s.k = part("self_attn.k_proj", {KD, C}, c.qkv_bias);
  s.v = part("self_attn.v_proj", {KD, C}, c.qkv_bias);
  s.o = part("self_attn.o_proj", {C, QD}, c.o_bias);
  if (c.qk_norm) {
    s.q_norm = NormSpec{NormKind::Rms, eps, {p + "self_attn.q_norm.weight", {c.head_dim}}, {}};
    s.k_norm = NormSpec{NormKind::Rms, eps, {p + "self_attn.k_norm.weight", {c.head_dim}}, {}};
  }
  s.mlp = {MlpKind::GatedSilu, C, I, part("mlp.gate_proj", {I, C}, c.mlp_bias), part("mlp.up_proj", {I, C}, c.mlp_bias),
           part("mlp.down_proj", {C, I}, c.mlp_bias), s.post_norm};
  if (c.moe.is_moe_layer(layer)) {
    MoeSpec m;
    m.hidden = C;
    m.inner = c.moe.intermediate_size;
    m.num_experts = c.moe.num_experts;
    m.top_k = c.moe.top_k;
    m.norm_topk_prob = c.moe.norm_topk_prob;
    m.router = {p + "mlp.gate.weight", {c.moe.num_experts, C}};
    m.experts = p + "mlp.experts.";
    m.pre_norm = s.post_norm;
    s.moe = m;
  }
  return s;
}

ExpertLayout resolve_expert_layout(const WeightStore& store, const std::string& prefix, const MoeSpec& spec,
                                   bool transposed_when_ambiguous) {
  const std::string base = prefix + spec.experts;
  const int64_t E = spec.num_experts, C = spec.hidden, I = spec.inner;
  // --load-format dummy: nothing is stored; the experts are made fused as transformers 5 saves
  // them (Qwen3-MoE and Qwen3-VL-MoE alike): gate_up_proj [E, 2I, C], down_proj [E, C, I].
  if (store.dummy_weights() != nullptr) return ExpertLayout::Fused;
  if (store.has(base + "gate_up_proj")) {
    const Shape got = store.tensors().at(base + "gate_up_proj").shape;
    const bool plain = got == Shape{E, 2 * I, C}, transposed = got == Shape{E, C, 2 * I};
    if (plain && transposed) return transposed_when_ambiguous ? ExpertLayout::FusedTransposed : ExpertLayout::Fused;
    if (plain) return ExpertLayout::Fused;
    if (transposed) return ExpertLayout::FusedTransposed;
    throw LoadError(fmt::format("{}gate_up_proj has shape {}; {} experts of {} x {} are stored as [{}, {}, {}] or "
                                "[{}, {}, {}]", base, got.str(), E, I, C, E, 2 * I, C, E, C, 2 * I));
  }
  if (store.has(base + "0.gate_proj.weight")) return ExpertLayout::PerExpert;
  throw LoadError("the mixture-of-experts layer's experts are missing: neither " + base + "gate_up_proj / " + base +
                  "down_proj (fused) nor " + base + "0.gate_proj.weight ... (one per expert) is in the checkpoint");
}

void check_mlp_tensors(const WeightStore& store, const std::string& prefix, int64_t layer, const LlamaLayerSpec& spec,
                       const MoeSpec* moe) {
  const std::string mlp = prefix + "layers." + std::to_string(layer) + ".mlp.";
  std::set<std::string> read;  // full names
  auto add = [&](const LinearPart& p) {
    read.insert(prefix + p.weight.name);
    if (!p.bias.empty()) read.insert(prefix + p.bias);
  };
  if (moe == nullptr) {
    add(spec.mlp.gate);
    add(spec.mlp.up);
    add(spec.mlp.down);
  } else {
    read.insert(prefix + moe->router.name);
    const std::string base = prefix + moe->experts;
    if (moe->layout == ExpertLayout::PerExpert) {
      for (int64_t e = 0; e < moe->num_experts; ++e)
        for (const char* part : {"gate_proj", "up_proj", "down_proj"})
          read.insert(fmt::format("{}{}.{}.weight", base, e, part));
    } else {
      read.insert(base + "gate_up_proj");
      read.insert(base + "down_proj");
    }
  }
  const auto& all = store.tensors();
  for (auto it = all.lower_bound(mlp); it != all.end() && it->first.compare(0, mlp.size(), mlp) == 0; ++it) {
    if (read.count(it->first)) continue;
    const char* layout = moe == nullptr                               ? ""
                         : moe->layout == ExpertLayout::PerExpert     ? "per expert"
                         : moe->layout == ExpertLayout::Fused         ? "fused [E, 2I, C]"
                                                                      : "fused [E, C, 2I]";
    const std::string what =
        moe == nullptr ? std::string("dense (mlp_only_layers / decoder_sparse_step): gate_proj, up_proj, down_proj")
                       : fmt::format("a mixture of {} experts: the router mlp.gate.weight and the experts {}",
                                     moe->num_experts, layout);
    throw LoadError(fmt::format("checkpoint tensor {} is not read: layer {} is {} (not read: shared experts, a router "
                                "bias or another gating, quantization scales, experts on a layer the config keeps "
                                "dense)",
                                it->first, layer, what));
  }
}

namespace {

// Rank r's part of a layer's spec (DecoderShard): q/k/v and gate/up by rows, o and down by
// columns (registered with the sharded source), their biases on rank 0 only.
void shard_layer_spec(LlamaLayerSpec& s, const ModelConfig& c, const DecoderShard& sh, int rank, ShardedWeightSource& src,
                      const std::string& prefix) {
  const int64_t C = c.hidden_size, D = c.head_dim, QD = sh.heads * D, KD = sh.kv_heads * D;
  s.q.row_begin = sh.head_begin * D;
  s.q.row_end = s.q.row_begin + QD;
  for (LinearPart* p : {&s.k, &s.v}) {
    p->row_begin = sh.kv_head_begin * D;
    p->row_end = p->row_begin + KD;
  }
  src.slice_cols(prefix + s.o.weight.name, s.o.weight.shape, sh.head_begin * D, sh.head_begin * D + QD);
  s.o.weight.shape = {C, QD};
  for (LinearPart* p : {&s.mlp.gate, &s.mlp.up}) {
    p->row_begin = sh.inner_begin;
    p->row_end = sh.inner_begin + sh.inner;
  }
  src.slice_cols(prefix + s.mlp.down.weight.name, s.mlp.down.weight.shape, sh.inner_begin, sh.inner_begin + sh.inner);
  s.mlp.down.weight.shape = {C, sh.inner};
  s.mlp.inner = sh.inner;
  if (rank != 0) {  // the row-parallel biases are added once, by rank 0, before the sum
    s.o.bias.clear();
    s.mlp.down.bias.clear();
  }
}

}  // namespace

LlamaDecoder::LlamaDecoder(const ModelConfig& c, LayerBackend& backend, const WeightStore& weights,
                           const DecoderWeightNames& names, const TensorParallel& tp)
    : vocab_(c.vocab_size), tp_(tp) {
  const int64_t C = c.hidden_size, V = c.vocab_size, D = c.head_dim;
  const bool par = tp.enabled();
  if (par) {
    VLM_CHECK(tp.comm != nullptr && tp.comm->size() == tp.size && tp.comm->rank() == tp.rank,
              "rank {} of {} without its communicator", tp.rank, tp.size);
    if (c.moe.enabled())
      throw LoadError(fmt::format("tensor parallelism ({} ranks) over a mixture-of-experts model is not supported", tp.size));
  }
  shard_ = decoder_shard(c.num_heads, c.num_kv_heads, c.intermediate_size, V, tp);
  const int64_t QD = shard_.heads * D, KD = shard_.kv_heads * D;  // this rank's (all of them when N == 1)
  if (par) sharded_ = std::make_unique<ShardedWeightSource>(weights);
  const WeightSource w = par ? sharded_->under(names.prefix) : WeightSource(weights, names.prefix);
  embed_ = backend.embedding(w, {"embed_tokens.weight", {V, C}});  // replicated under TP
  rope_ = backend.rope_table(c.rope);
  const NormSpec final_norm{NormKind::Rms, static_cast<float>(c.rms_norm_eps), {"norm.weight", {C}}, {}};
  const NormSpec absolute{final_norm.kind, final_norm.eps, {names.prefix + "norm.weight", {C}}, {}};
  // The LM head after the final norm. Tied checkpoints usually omit lm_head.weight; some keep a
  // copy. Follow the config.
  if (par && shard_.vocab_split) {  // rows [vocab_begin, + vocab) of the head's table
    const int64_t b = shard_.vocab_begin, e = b + shard_.vocab;
    if (c.tie_word_embeddings) head_ = backend.linear(w, {{{"embed_tokens.weight", {V, C}}, {}, b, e}}, &final_norm);
    else head_ = backend.linear(WeightSource(weights, ""), {{{names.lm_head, {V, C}}, {}, b, e}}, &absolute);
  } else if (c.tie_word_embeddings) {
    head_ = backend.tied_linear(*embed_, w, &final_norm);
  } else {
    head_ = backend.linear(WeightSource(weights, ""), {{{names.lm_head, {V, C}}, {}}}, &absolute);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  int64_t inner = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LlamaLayerSpec s = llama_layer_spec(c, l);
    if (par) shard_layer_spec(s, c, shard_, tp.rank, *sharded_, names.prefix);
    Block b;
    b.qkv = backend.linear(w, {s.q, s.k, s.v}, &s.input_norm);
    AttentionSpec attn{static_cast<int>(l), shard_.heads, shard_.kv_heads, D, scale, s.q_norm, s.k_norm};
    attn.head_begin = shard_.head_begin;  // the methods read per-head settings by the model's head
    attn.total_heads = c.num_heads;
    attn.kv_head_begin = shard_.kv_head_begin;
    attn.total_kv_heads = c.num_kv_heads;
    b.attn = backend.causal_attention(w, attn, *rope_);  // with the q/k norm's weights, if any
    b.o = backend.linear(w, {s.o});
    if (s.moe) {  // a mixture of experts with the post-attention norm
      MoeSpec m = *s.moe;
      m.layout = resolve_expert_layout(weights, names.prefix, m, c.moe.fused_transposed_when_ambiguous);
      check_mlp_tensors(weights, names.prefix, l, s, &m);
      b.mlp = backend.moe(w, m);
    } else {
      if (c.moe.enabled()) check_mlp_tensors(weights, names.prefix, l, s, nullptr);  // a dense layer of a MoE model
      b.mlp = backend.mlp(w, s.mlp);  // with the post-attention norm
    }
    inner = std::max(inner, b.mlp->inner_cols());
    blocks_.push_back(std::move(b));
  }
  VLM_CHECK(c.deepstack_layers >= 0 && c.deepstack_layers <= c.num_layers, "{} DeepStack planes for {} layers",
            c.deepstack_layers, c.num_layers);
  deepstack_ = c.deepstack_layers;
  if (deepstack_ > 0) rows_ = backend.row_ops();
  plan_.bufs.resize(kNumBufs);
  plan_.bufs[kResidual] = {C, ActRole::Residual, false};
  plan_.bufs[kQkv] = {QD + 2 * KD, ActRole::Hidden, false};
  plan_.bufs[kInner] = {inner, ActRole::Hidden, false};
  if (par) coll_ = backend.collective(*tp.comm);
  if (par && shard_.vocab_split) {
    plan_.bufs[kLocalLogits] = {shard_.vocab, ActRole::Logits, true};
    plan_.bufs[kGathered] = {V, ActRole::Logits, true};
  } else {
    plan_.bufs.resize(kLocalLogits);
  }
}

void LlamaDecoder::forward(Step& s) const {
  const Act x = s.act(kResidual), qkv = s.act(kQkv), inner = s.act(kInner);
  const RopeRows rope = rope_->build(s);  // cos/sin of every row, once for all layers
  embed_->forward(s, x);                  // token rows, media rows from the step's override
  // TP: rank 0 adds its part of o and down to the residual, the others write theirs over their
  // copy; the all-reduce after each then gives every rank x + the sum of the parts.
  const Accum add = tp_.rank == 0 ? Accum::Add : Accum::Write;
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    b.qkv->forward(s, x, qkv);            // q | k | v of rms(x) * g (+ bias)
    const Act a = b.attn->forward(s, qkv, rope);  // RoPE, K/V -> cache, attention with the methods
    b.o->forward(s, a, x, add);           // x += a Wo^T (+ bias)
    if (coll_) coll_->all_reduce_sum(s, x);  // TP: x + every rank's part
    b.mlp->forward(s, x, inner, x, add);  // x += down(silu(gate h) * up h), h = rms(x) * g2
    if (coll_) coll_->all_reduce_sum(s, x);
    if (static_cast<int64_t>(l) < deepstack_) rows_->add_override_plane(s, static_cast<int64_t>(l) + 1, x);  // DeepStack
  }
  if (coll_ && shard_.vocab_split) {  // this rank's vocabulary slice, then every rank's side by side
    const Act local = s.act(kLocalLogits);
    head_->forward_rows(s, x, local);
    coll_->gather_cols(s, local, s.act(kGathered), s.logits(vocab_));
    return;
  }
  head_->forward_rows(s, x, s.logits(vocab_));  // logit rows only, after the final norm
}

}  // namespace vlm
