#include "tests/support/qwen3_naive.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "model/decoder/forward_batch.h"
#include "model/decoder/safetensors.h"

namespace vlm::testing {
namespace {

using Vec = std::vector<double>;

// y = W x (+ b): W [N, K] row-major.
Vec matvec(const std::vector<float>& w, const Vec& x, int64_t N, const std::vector<float>* b = nullptr) {
  const int64_t K = static_cast<int64_t>(x.size());
  Vec y(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double acc = b ? (*b)[static_cast<size_t>(n)] : 0.0;
    for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(w[static_cast<size_t>(n * K + k)]) * x[static_cast<size_t>(k)];
    y[static_cast<size_t>(n)] = acc;
  }
  return y;
}

// RMSNorm of x[off, off + n) in place, times w.
void rms(Vec& x, size_t off, size_t n, const std::vector<float>& w, double eps = 1e-6) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[off + i] = x[off + i] * inv * w[i];
}

void rope(Vec& x, size_t off, int64_t D, int64_t pos) {
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) {
    // inv_freq as transformers computes it: 1 / theta^(2i / D) in f32
    const float inv = 1.0f / std::pow(1000000.0f, static_cast<float>(2 * i) / static_cast<float>(D));
    const double a = static_cast<double>(static_cast<float>(pos) * inv);
    const double x1 = x[off + i], x2 = x[off + i + half];
    x[off + i] = x1 * std::cos(a) - x2 * std::sin(a);
    x[off + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// down(silu(gate h) * up h) with the tensors under `p` ("...mlp." or "...mlp.experts.E.").
Vec gated_mlp(const Qwen3Checkpoint& ck, const std::string& p, const Vec& h, int64_t I) {
  Vec g = matvec(ck[p + "gate_proj.weight"], h, I), u = matvec(ck[p + "up_proj.weight"], h, I);
  for (int64_t i = 0; i < I; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(ck[p + "down_proj.weight"], g, ck.s.C);
}

// Qwen3MoeSparseMoeBlock: softmax router, top K (ties to the lower index), optional renormalisation.
Vec moe_block(const Qwen3Checkpoint& ck, const std::string& p, const Vec& h) {
  const Qwen3Shape& s = ck.s;
  Vec pr = matvec(ck[p + "mlp.gate.weight"], h, s.E);
  const double mx = *std::max_element(pr.begin(), pr.end());
  double sum = 0;
  for (double& v : pr) sum += (v = std::exp(v - mx));
  for (double& v : pr) v /= sum;
  std::vector<bool> taken(static_cast<size_t>(s.E), false);
  double wsum = 0;
  for (int64_t j = 0; j < s.K; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < s.E; ++e)
      if (!taken[e] && (best < 0 || pr[e] > pr[best])) best = e;
    taken[best] = true;
    wsum += pr[best];
  }
  Vec y(static_cast<size_t>(s.C), 0.0);
  for (int64_t e = 0; e < s.E; ++e) {
    if (!taken[e]) continue;
    const double w = s.norm_topk ? pr[e] / wsum : pr[e];
    const Vec o = gated_mlp(ck, p + "mlp.experts." + std::to_string(e) + ".", h, s.MI);
    for (int64_t c = 0; c < s.C; ++c) y[c] += w * o[c];
  }
  return y;
}

}  // namespace

bool Qwen3Shape::is_moe_layer(int64_t l) const {
  return E > 0 && std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && (l + 1) % sparse_step == 0;
}

Qwen3Checkpoint write_qwen3_checkpoint(const Qwen3Shape& s, const std::string& name, uint32_t seed) {
  Qwen3Checkpoint ck;
  ck.s = s;
  ck.dir = (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(ck.dir);
  const bool moe = s.E > 0;
  std::ostringstream only;
  for (size_t i = 0; i < s.mlp_only.size(); ++i) only << (i ? ", " : "") << s.mlp_only[i];
  std::ofstream cfg(ck.dir + "/config.json");
  cfg << R"({"architectures": [")" << (moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM") << R"("], "model_type": ")"
      << (moe ? "qwen3_moe" : "qwen3") << R"(", "vocab_size": )" << s.V << R"(, "hidden_size": )" << s.C
      << R"(, "intermediate_size": )" << s.I << R"(, "num_hidden_layers": )" << s.L << R"(, "num_attention_heads": )"
      << s.H << R"(, "num_key_value_heads": )" << s.Hkv << R"(, "head_dim": )" << s.D
      << R"(, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "attention_bias": )" << (s.bias ? "true" : "false")
      << R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": )"
      << (s.tied ? "true" : "false") << R"(, "hidden_act": "silu", "dtype": "float32", "use_sliding_window": false)";
  if (moe)
    cfg << R"(, "num_experts": )" << s.E << R"(, "num_experts_per_tok": )" << s.K << R"(, "moe_intermediate_size": )"
        << s.MI << R"(, "norm_topk_prob": )" << (s.norm_topk ? "true" : "false") << R"(, "decoder_sparse_step": )"
        << s.sparse_step << R"(, "mlp_only_layers": [)" << only.str() << "]";
  cfg << "}";
  cfg.close();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::map<std::string, std::vector<float>> fused;  // the file's fused expert tensors
  std::map<std::string, TensorView> views;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, float scale, float offset = 0.f, bool write = true) {
    int64_t count = 1;
    Shape sh;
    for (int64_t d : shape) count *= d, sh.dims[sh.ndim++] = d;
    auto& v = ck.t[n];
    v.resize(static_cast<size_t>(count));
    for (float& x : v) x = offset + scale * nd(rng);
    if (write) views.emplace(n, TensorView(v.data(), DType::F32, sh));
  };
  const int64_t QD = s.H * s.D, KD = s.Hkv * s.D;
  add("model.embed_tokens.weight", {s.V, s.C}, 0.5f);
  add("model.norm.weight", {s.C}, 0.2f, 1.f);
  if (!s.tied) add("lm_head.weight", {s.V, s.C}, 0.3f);
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {s.C}, 0.2f, 1.f);
    add(p + "post_attention_layernorm.weight", {s.C}, 0.2f, 1.f);
    add(p + "self_attn.q_proj.weight", {QD, s.C}, 0.25f);
    add(p + "self_attn.k_proj.weight", {KD, s.C}, 0.25f);
    add(p + "self_attn.v_proj.weight", {KD, s.C}, 0.25f);
    add(p + "self_attn.o_proj.weight", {s.C, QD}, 0.25f);
    add(p + "self_attn.q_norm.weight", {s.D}, 0.3f, 1.f);
    add(p + "self_attn.k_norm.weight", {s.D}, 0.3f, 1.f);
    if (s.bias) {
      add(p + "self_attn.q_proj.bias", {QD}, 0.2f);
      add(p + "self_attn.k_proj.bias", {KD}, 0.2f);
      add(p + "self_attn.v_proj.bias", {KD}, 0.2f);
      add(p + "self_attn.o_proj.bias", {s.C}, 0.2f);
    }
    if (!s.is_moe_layer(l)) {
      add(p + "mlp.gate_proj.weight", {s.I, s.C}, 0.25f);
      add(p + "mlp.up_proj.weight", {s.I, s.C}, 0.25f);
      add(p + "mlp.down_proj.weight", {s.C, s.I}, 0.25f);
      continue;
    }
    add(p + "mlp.gate.weight", {s.E, s.C}, 0.4f);
    const bool per = s.experts == ExpertLayout::PerExpert, tr = s.experts == ExpertLayout::FusedTransposed;
    for (int64_t e = 0; e < s.E; ++e) {
      const std::string n = p + "mlp.experts." + std::to_string(e) + ".";
      add(n + "gate_proj.weight", {s.MI, s.C}, 0.25f, 0.f, per);
      add(n + "up_proj.weight", {s.MI, s.C}, 0.25f, 0.f, per);
      add(n + "down_proj.weight", {s.C, s.MI}, 0.25f, 0.f, per);
    }
    if (per) continue;
    const int64_t E = s.E, I = s.MI, C = s.C;
    auto& gu = fused[p + "mlp.experts.gate_up_proj"];
    auto& dn = fused[p + "mlp.experts.down_proj"];
    gu.resize(static_cast<size_t>(E * 2 * I * C));
    dn.resize(static_cast<size_t>(E * C * I));
    for (int64_t e = 0; e < E; ++e) {
      const std::string n = p + "mlp.experts." + std::to_string(e) + ".";
      for (int64_t i = 0; i < 2 * I; ++i)
        for (int64_t c = 0; c < C; ++c)
          gu[static_cast<size_t>(tr ? (e * C + c) * 2 * I + i : (e * 2 * I + i) * C + c)] =
              i < I ? ck[n + "gate_proj.weight"][i * C + c] : ck[n + "up_proj.weight"][(i - I) * C + c];
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < I; ++i)
          dn[static_cast<size_t>(tr ? (e * I + i) * C + c : (e * C + c) * I + i)] = ck[n + "down_proj.weight"][c * I + i];
    }
    views.emplace(p + "mlp.experts.gate_up_proj", TensorView(gu.data(), DType::F32, tr ? Shape{E, C, 2 * I} : Shape{E, 2 * I, C}));
    views.emplace(p + "mlp.experts.down_proj", TensorView(dn.data(), DType::F32, tr ? Shape{E, I, C} : Shape{E, C, I}));
  }
  write_safetensors(ck.dir + "/model.safetensors", views);
  return ck;
}

std::vector<std::vector<double>> naive_qwen3_logits(const Qwen3Checkpoint& ck, const std::vector<int32_t>& ids) {
  const Qwen3Shape& s = ck.s;
  const int64_t T = static_cast<int64_t>(ids.size()), G = s.H / s.Hkv;
  std::vector<Vec> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto& e = ck["model.embed_tokens.weight"];
    x[static_cast<size_t>(t)].assign(e.begin() + ids[static_cast<size_t>(t)] * s.C, e.begin() + (ids[static_cast<size_t>(t)] + 1) * s.C);
  }
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto bias = [&](const std::string& n) { return s.bias ? &ck[p + n] : nullptr; };
    std::vector<Vec> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      Vec h = x[static_cast<size_t>(t)];
      rms(h, 0, static_cast<size_t>(s.C), ck[p + "input_layernorm.weight"]);
      q[t] = matvec(ck[p + "self_attn.q_proj.weight"], h, s.H * s.D, bias("self_attn.q_proj.bias"));
      k[t] = matvec(ck[p + "self_attn.k_proj.weight"], h, s.Hkv * s.D, bias("self_attn.k_proj.bias"));
      v[t] = matvec(ck[p + "self_attn.v_proj.weight"], h, s.Hkv * s.D, bias("self_attn.v_proj.bias"));
      for (int64_t hh = 0; hh < s.H; ++hh) {
        rms(q[t], static_cast<size_t>(hh * s.D), static_cast<size_t>(s.D), ck[p + "self_attn.q_norm.weight"]);
        rope(q[t], static_cast<size_t>(hh * s.D), s.D, t);
      }
      for (int64_t hh = 0; hh < s.Hkv; ++hh) {
        rms(k[t], static_cast<size_t>(hh * s.D), static_cast<size_t>(s.D), ck[p + "self_attn.k_norm.weight"]);
        rope(k[t], static_cast<size_t>(hh * s.D), s.D, t);
      }
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
    for (int64_t t = 0; t < T; ++t) {
      Vec att(static_cast<size_t>(s.H * s.D), 0.0);
      for (int64_t hh = 0; hh < s.H; ++hh) {
        const int64_t kv = hh / G;
        Vec sc(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < s.D; ++i) d += q[t][hh * s.D + i] * k[j][kv * s.D + i];
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < s.D; ++i) att[hh * s.D + i] += sc[j] / sum * v[j][kv * s.D + i];
      }
      const Vec o = matvec(ck[p + "self_attn.o_proj.weight"], att, s.C, bias("self_attn.o_proj.bias"));
      for (int64_t c = 0; c < s.C; ++c) x[t][c] += o[c];
      Vec h = x[t];
      rms(h, 0, static_cast<size_t>(s.C), ck[p + "post_attention_layernorm.weight"]);
      const Vec dn = s.is_moe_layer(l) ? moe_block(ck, p, h) : gated_mlp(ck, p + "mlp.", h, s.I);
      for (int64_t c = 0; c < s.C; ++c) x[t][c] += dn[c];
    }
  }
  std::vector<Vec> logits;
  for (int64_t t = 0; t < T; ++t) {
    Vec h = x[t];
    rms(h, 0, static_cast<size_t>(s.C), ck["model.norm.weight"]);
    logits.push_back(matvec(ck[s.tied ? "model.embed_tokens.weight" : "lm_head.weight"], h, s.V));
  }
  return logits;
}

Qwen3Runner::Qwen3Runner(const std::string& dir) : dec(LlmDecoder::load(dir)) {
  KVCacheShape sh;
  sh.num_layers = dec->config().num_layers;
  sh.num_blocks = 16;
  sh.block_size = 8;
  sh.num_kv_heads = static_cast<int>(dec->config().num_kv_heads);
  sh.head_dim = static_cast<int>(dec->config().head_dim);
  sh.dtype = DType::F32;
  cache = std::make_unique<KVCache>(sh);
}

std::vector<std::vector<float>> Qwen3Runner::run(const std::vector<std::vector<int32_t>>& seqs,
                                                 const std::vector<int32_t>& chunk) {
  const size_t n = seqs.size();
  std::vector<std::vector<int32_t>> blocks(n);
  for (size_t i = 0; i < n; ++i)
    for (int32_t b = 0; b < 8; ++b) blocks[i].push_back(static_cast<int32_t>(15 - (i * 8 + static_cast<size_t>(b))));
  std::vector<int32_t> done(n, 0);
  std::vector<std::vector<float>> out(n);
  const int64_t V = dec->config().vocab_size;
  for (;;) {
    std::vector<SequenceChunk> cs;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      const int32_t left = static_cast<int32_t>(seqs[i].size()) - done[i];
      if (left <= 0) continue;
      SequenceChunk c;
      c.token_ids = std::span<const int32_t>(seqs[i].data() + done[i], static_cast<size_t>(std::min(left, chunk[i])));
      c.start_pos = done[i];
      c.block_table = blocks[i];
      c.logits = LogitsFor::All;
      cs.push_back(c);
      who.push_back(i);
    }
    if (cs.empty()) break;
    const ForwardBatch fb = make_forward_batch(cs, 8);
    std::vector<float> logits;
    dec->forward(fb, cache->layers(), logits);
    size_t row = 0;
    for (size_t j = 0; j < cs.size(); ++j) {
      const auto m = static_cast<int64_t>(cs[j].token_ids.size());
      out[who[j]].insert(out[who[j]].end(), logits.begin() + static_cast<int64_t>(row) * V,
                         logits.begin() + (static_cast<int64_t>(row) + m) * V);
      done[who[j]] += static_cast<int32_t>(m);
      row += static_cast<size_t>(m);
    }
  }
  return out;
}

double max_row_rel(const std::vector<float>& ours, const std::vector<std::vector<double>>& want) {
  double worst = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want[r].size(); ++i) {
      const double d = ours[r * want[r].size() + i] - want[r][i];
      num += d * d;
      den += want[r][i] * want[r][i];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

}  // namespace vlm::testing
