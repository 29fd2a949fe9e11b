#include "model/methods/sparse_pattern_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"

namespace vlm {

std::vector<PatternCandidate> pattern_candidates(int N, bool mixed) {
  std::vector<PatternCandidate> c;
  HeadPattern p;
  p.type = HeadPatternType::Dense;
  c.push_back({"dense", p});
  for (int div : {16, 8, 4}) {
    p = {};
    p.type = HeadPatternType::AShape;
    p.n_init = 128;
    p.n_local = std::max(64, N / div);
    c.push_back({"a_shape_" + std::to_string(div), p});
  }
  const double sc = N / 25000.0;
  for (int s : {1024, 2048, 4096}) {
    p = {};
    p.type = HeadPatternType::VerticalSlash;
    p.vertical_size = std::max(30, static_cast<int>(1000 * sc));
    p.slash_size = std::max(50, static_cast<int>(s * sc));
    c.push_back({"vertical_slash_" + std::to_string(s), p});
  }
  for (const char* lines : {"s", "vs", "hvs"}) {
    p = {};
    p.type = HeadPatternType::Grid;
    p.grid.use_hline = std::string(lines).find('h') != std::string::npos;
    p.grid.use_vline = std::string(lines).find('v') != std::string::npos;
    p.grid.max_stride = std::min(1024, std::max(16, N / 4));
    c.push_back({std::string("grid_") + lines, p});
  }
  p = {};
  p.type = HeadPatternType::XAttention;
  p.xattention.threshold = 0.9f;
  c.push_back({"xattention", p});
  if (mixed)
    for (auto kind : {BoundaryKind::Q, BoundaryKind::TwoD}) {
      p = {};
      p.type = HeadPatternType::VerticalSlash;
      p.boundary = kind;
      p.vertical_size = std::max(30, static_cast<int>(1000 * sc));
      p.slash_size = std::max(50, static_cast<int>(2048 * sc));
      c.push_back({kind == BoundaryKind::Q ? "q_boundary" : "2d_boundary", p});
    }
  return c;
}

std::vector<PatternCandidate> select_candidates(const std::vector<PatternCandidate>& all, const std::string& names) {
  std::vector<std::string> want;
  std::stringstream ss(names);
  for (std::string n; std::getline(ss, n, ',');)
    if (!n.empty()) want.push_back(n);
  for (const auto& n : want)
    if (std::none_of(all.begin(), all.end(), [&](const PatternCandidate& c) { return c.name == n; }))
      throw std::invalid_argument("unknown candidate '" + n + "'");
  std::vector<PatternCandidate> out;
  for (const auto& c : all)
    if (c.name == "dense" || std::find(want.begin(), want.end(), c.name) != want.end()) out.push_back(c);
  return out;
}

bool PatternSearchPrompt::mixed() const {
  return std::any_of(codes.begin(), codes.end(), [&](uint8_t c) { return c != codes[0]; });
}

PatternSearchPrompt make_search_prompt(std::vector<int32_t> ids, const std::vector<std::pair<int, int>>& videos) {
  PatternSearchPrompt p;
  const int N = static_cast<int>(ids.size());
  p.ids = std::move(ids);
  p.tags.assign(N, ModalityTag{});
  p.codes.assign(N, 0);
  for (auto [s, n] : videos)
    for (int j = std::max(0, s); j < std::min(N, s + n); ++j) {
      p.tags[j] = {Modality::Video, 0};
      p.codes[j] = static_cast<uint8_t>(Modality::Video);
    }
  return p;
}

PatternChoice choose_patterns(const PatternSearchTable& table, const std::vector<PatternCandidate>& cands,
                              double target) {
  PatternChoice r;
  const int L = static_cast<int>(table.scores.size());
  r.patterns.layers.resize(L);
  r.index.resize(L);
  r.errors.resize(L);
  for (int l = 0; l < L; ++l) {
    const auto& per_cand = table.scores[l];
    const int H = per_cand.empty() ? 0 : static_cast<int>(per_cand[0].size());
    for (int h = 0; h < H; ++h) {
      int best = 0;
      double best_density = 2.0, best_err = 0.0;
      for (size_t ci = 0; ci < per_cand.size(); ++ci) {
        const PatternScore& s = per_cand[ci][h];
        if (s.error <= target && s.density < best_density) {
          best = static_cast<int>(ci);
          best_density = s.density;
          best_err = s.error;
        }
      }
      r.patterns.layers[l].push_back(cands[best].pattern);
      r.index[l].push_back(best);
      r.errors[l].push_back(best_err);
    }
  }
  return r;
}

double causal_key_blocks(int q_len, int num_keys, int block) {
  double c = 0;
  const int off = num_keys - q_len, nqb = (q_len + block - 1) / block;
  for (int m = 0; m < nqb; ++m) c += (off + std::min(q_len, (m + 1) * block) - 1) / block + 1;
  return c;
}

PatternSearchTable search_patterns_cpu(const LlmDecoder& decoder, const PatternSearchPrompt& prompt,
                                       const std::vector<PatternCandidate>& cands, int block,
                                       const std::function<void(int)>& progress) {
  const auto& cfg = decoder.config();
  const int L = static_cast<int>(cfg.num_layers), Hkv = static_cast<int>(cfg.num_kv_heads),
            D = static_cast<int>(cfg.head_dim), N = static_cast<int>(prompt.ids.size());
  // A paged f32 cache of one sequence (identity block table).
  const int B = 16, nb = (N + B - 1) / B;
  std::vector<std::vector<float>> kbuf(L), vbuf(L);
  std::vector<PagedKVLayer> kv(L);
  for (int l = 0; l < L; ++l) {
    kbuf[l].assign(static_cast<size_t>(nb) * B * Hkv * D, 0.0f);
    vbuf[l].assign(kbuf[l].size(), 0.0f);
    kv[l] = PagedKVLayer{kbuf[l].data(), vbuf[l].data(), DType::F32, nb, B, Hkv, D};
  }
  std::vector<int32_t> table(nb);
  for (int i = 0; i < nb; ++i) table[i] = i;
  SequenceChunk chunk;
  chunk.token_ids = prompt.ids;
  chunk.block_table = table;
  chunk.logits = LogitsFor::Last;
  chunk.modalities = prompt.tags;
  ForwardBatch fb = make_forward_batch({&chunk, 1}, B);

  PatternSearchTable result;
  result.scores.resize(L);
  result.layer_seconds.assign(L, 0.0);
  result.probe_rows = result.num_keys = N;
  const double causal = causal_key_blocks(N, N, block);
  fb.attention_probe = [&](int layer, const float* q, int Hq, const PagedKVLayer& kvl, float scale) {
    const auto t0 = std::chrono::steady_clock::now();
    const AttentionBatch ab = fb.attention_batch();
    std::vector<float> dense(static_cast<size_t>(N) * Hq * D), out(dense.size());
    paged_attention(q, Hq, kvl, ab, scale, dense.data());
    std::vector<double> dnorm(Hq, 0.0);
    for (int r = 0; r < N; ++r)
      for (int h = 0; h < Hq; ++h)
        for (int d = 0; d < D; ++d) dnorm[h] += std::pow(dense[(static_cast<size_t>(r) * Hq + h) * D + d], 2);
    auto& scores = result.scores[layer];
    scores.assign(cands.size(), std::vector<PatternScore>(Hq));
    for (size_t ci = 0; ci < cands.size(); ++ci) {
      SparsePrefillConfig sc;
      sc.method = SparsePrefillMethod::MMInference;
      sc.block = block;
      sc.default_head = cands[ci].pattern;
      ChunkView cv{q, N, N, N, table.data(), layer, prompt.codes.data(), {}};
      const BlockSparsePlan plan = build_sparse_plan(sc, cv, Hq, kvl, scale);
      const BlockSparsePlan* pp = &plan;
      block_sparse_attention(q, Hq, kvl, ab, {&pp, 1}, scale, out.data());
      for (int h = 0; h < Hq; ++h) {
        double e = 0;
        for (int r = 0; r < N; ++r)
          for (int d = 0; d < D; ++d) {
            const size_t i = (static_cast<size_t>(r) * Hq + h) * D + d;
            e += std::pow(static_cast<double>(out[i]) - dense[i], 2);
          }
        const auto& hp = plan.heads[h];
        scores[ci][h].error = std::sqrt(e / std::max(dnorm[h], 1e-30));
        scores[ci][h].density = (hp.blocks.size() + hp.cols.size() / static_cast<double>(block)) / causal;
      }
    }
    result.layer_seconds[layer] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) progress(layer);
  };
  std::vector<float> logits;
  decoder.forward(fb, kv, logits);
  return result;
}

}  // namespace vlm
