// vlm-search-patterns: the offline per-head sparse-pattern search (MMInference's Algorithm 4,
// ALGORITHMS.md §4.5): runs the model's prefill on one calibration prompt, and per layer and
// query head measures every candidate pattern's attention-output error against dense attention
// and its kept-block density, then picks the cheapest candidate (lowest density) whose error is
// at most --target-error (dense when none is: exactness first). Writes the per-head file of
// model/methods/sparse_patterns_file.h, which vlm-server reads with --sparse-prefill-config.
//
//   vlm-search-patterns --model DIR --out FILE [--calibration IDS_FILE | --length N] [--seed S]
//                       [--video START:LEN]... [--target-error E] [--block B] [--threads N]
//
// IDS_FILE: whitespace-separated token ids. Without it, N random ids (default 2048).
// --video marks positions [START, START+LEN) as video tokens (modality tags only: the boundary
// candidates are searched when the prompt mixes modalities). Candidates (sizes scaled to the
// prompt length N from the paper's Table 3, whose calibration prompt had ~25K tokens):
// dense; A-shape (128, N/16 | N/8 | N/4); vertical-slash (1000, 1024 | 2048 | 4096) * N/25000;
// grid (stride search; lines s, vs, hvs); XAttention (S 8, tau 0.9); Q- and 2D-boundary
// vertical-slash (1000, 2048) * N/25000 with mixed modalities. Error: ||o - o_dense|| / ||o_dense||
// over the head's rows (the attention output, as the paper's search).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/core/check.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "kernels/core/thread_pool.h"
#include "model/decoder/llm_decoder.h"
#include "model/methods/sparse_patterns_file.h"
#include "tools/common/cli_flags.h"

namespace {

const vlm::cli::FlagParser kCli(
    "vlm-search-patterns --model DIR --out FILE [--calibration IDS_FILE | --length N] [flags]",
    {{"model", "DIR: a Hugging Face checkpoint directory (required)"},
     {"out", "FILE: the per-head pattern file to write (required)"},
     {"calibration", "IDS_FILE: whitespace-separated token ids of the calibration prompt"},
     {"length", "N: without --calibration, N random ids (default 2048)"},
     {"seed", "S: seed of the random ids (default 1)"},
     {"video", "START:LEN: positions tagged as video tokens (repeatable)"},
     {"target-error", "E: the largest attention-output error a pattern may have (default 0.05)"},
     {"block", "B: block size of the sparse plans (default 64)"},
     {"threads", "N: compute threads (default: all cores)"}});

[[noreturn]] void usage(const std::string& e) { kCli.fail(e); }

struct Candidate {
  std::string name;
  vlm::HeadPattern pattern;
};

std::vector<Candidate> candidates(int N, bool mixed) {
  using vlm::HeadPatternType;
  std::vector<Candidate> c;
  vlm::HeadPattern p;
  p.type = HeadPatternType::Dense;
  c.push_back({"dense", p});
  for (int div : {16, 8, 4}) {
    p = {};
    p.type = HeadPatternType::AShape;
    p.n_init = 128;
    p.n_local = std::max(64, N / div);
    c.push_back({"a_shape", p});
  }
  const double sc = N / 25000.0;
  for (int s : {1024, 2048, 4096}) {
    p = {};
    p.type = HeadPatternType::VerticalSlash;
    p.vertical_size = std::max(30, static_cast<int>(1000 * sc));
    p.slash_size = std::max(50, static_cast<int>(s * sc));
    c.push_back({"vertical_slash", p});
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
    for (auto kind : {vlm::BoundaryKind::Q, vlm::BoundaryKind::TwoD}) {
      p = {};
      p.type = HeadPatternType::VerticalSlash;
      p.boundary = kind;
      p.vertical_size = std::max(30, static_cast<int>(1000 * sc));
      p.slash_size = std::max(50, static_cast<int>(2048 * sc));
      c.push_back({kind == vlm::BoundaryKind::Q ? "q_boundary" : "2d_boundary", p});
    }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const vlm::cli::FlagParser& fp = kCli;
  std::map<std::string, std::string> flags;
  std::vector<std::pair<int, int>> videos;
  for (const auto& [k, v] : fp.parse_list(argc, argv)) {
    if (k == "video") {
      const auto colon = v.find(':');
      if (colon == std::string::npos) usage("--video needs START:LEN, got '" + v + "'");
      videos.push_back({static_cast<int>(fp.integer(k, v.substr(0, colon), 0)),
                        static_cast<int>(fp.integer(k, v.substr(colon + 1), 0))});
    } else {
      flags[k] = v;  // the last one counts
    }
  }
  if (!flags.count("model") || !flags.count("out")) usage("--model and --out are required");
  try {
    if (flags.count("threads")) vlm::set_num_threads(static_cast<int>(fp.integer("threads", flags["threads"], 1)));
    const auto decoder = vlm::LlmDecoder::load(flags["model"]);
    const auto& cfg = decoder->config();
    const int L = static_cast<int>(cfg.num_layers), H = static_cast<int>(cfg.num_heads),
              Hkv = static_cast<int>(cfg.num_kv_heads), D = static_cast<int>(cfg.head_dim);
    std::vector<int32_t> ids;
    if (flags.count("calibration")) {
      std::ifstream in(flags["calibration"]);
      if (!in) throw vlm::LoadError(flags["calibration"] + ": cannot open");
      for (long long x; in >> x;) ids.push_back(static_cast<int32_t>(x));
    } else {
      const int n = flags.count("length") ? static_cast<int>(fp.integer("length", flags["length"], 2)) : 2048;
      std::mt19937 rng(flags.count("seed") ? static_cast<uint32_t>(fp.integer("seed", flags["seed"], 0)) : 1);
      std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(cfg.vocab_size) - 1);
      for (int i = 0; i < n; ++i) ids.push_back(u(rng));
    }
    const int N = static_cast<int>(ids.size());
    if (N < 2) usage("the calibration prompt needs at least 2 tokens");
    for (int32_t t : ids)
      if (t < 0 || t >= cfg.vocab_size) throw vlm::LoadError("calibration token id out of range");
    std::vector<vlm::ModalityTag> tags(N);
    std::vector<uint8_t> codes(N, 0);
    for (auto [s, n] : videos)
      for (int j = std::max(0, s); j < std::min(N, s + n); ++j) {
        tags[j] = {vlm::Modality::Video, 0};
        codes[j] = 2;
      }
    const bool mixed = std::any_of(codes.begin(), codes.end(), [&](uint8_t c) { return c != codes[0]; });
    const double target = flags.count("target-error") ? fp.number("target-error", flags["target-error"], 0, 1e9) : 0.05;
    const int block = flags.count("block") ? static_cast<int>(fp.integer("block", flags["block"], 1)) : 64;

    // A paged f32 cache of one sequence (identity block table).
    const int B = 16, nb = (N + B - 1) / B;
    std::vector<std::vector<float>> kbuf(L), vbuf(L);
    std::vector<vlm::PagedKVLayer> kv(L);
    for (int l = 0; l < L; ++l) {
      kbuf[l].assign(static_cast<size_t>(nb) * B * Hkv * D, 0.0f);
      vbuf[l].assign(kbuf[l].size(), 0.0f);
      kv[l] = vlm::PagedKVLayer{kbuf[l].data(), vbuf[l].data(), vlm::DType::F32, nb, B, Hkv, D};
    }
    std::vector<int32_t> table(nb);
    for (int i = 0; i < nb; ++i) table[i] = i;
    vlm::SequenceChunk chunk;
    chunk.token_ids = ids;
    chunk.block_table = table;
    chunk.logits = vlm::LogitsFor::Last;
    chunk.modalities = tags;
    vlm::ForwardBatch fb = vlm::make_forward_batch({&chunk, 1}, B);

    const auto cands = candidates(N, mixed);
    vlm::SparseHeadPatterns result;
    std::vector<std::vector<double>> scores(L);
    result.layers.resize(L);
    fb.attention_probe = [&](int layer, const float* q, int Hq, const vlm::PagedKVLayer& kvl, float scale) {
      const vlm::AttentionBatch ab = fb.attention_batch();
      std::vector<float> dense(static_cast<size_t>(N) * Hq * D), out(dense.size());
      vlm::paged_attention(q, Hq, kvl, ab, scale, dense.data());
      std::vector<double> dnorm(Hq, 0.0);
      for (int r = 0; r < N; ++r)
        for (int h = 0; h < Hq; ++h)
          for (int d = 0; d < D; ++d) dnorm[h] += std::pow(dense[(static_cast<size_t>(r) * Hq + h) * D + d], 2);
      std::vector<int> best(Hq, 0);
      std::vector<double> best_density(Hq, 2.0), best_err(Hq, 0.0);
      const vlm::BlockSparsePlan causal = vlm::dense_plan(N, N, 1, block, block);
      const double causal_blocks = static_cast<double>(causal.heads[0].blocks.size());
      for (size_t ci = 0; ci < cands.size(); ++ci) {
        vlm::SparsePrefillConfig sc;
        sc.method = vlm::SparsePrefillMethod::MMInference;
        sc.block = block;
        sc.default_head = cands[ci].pattern;
        vlm::ChunkView cv{q, N, N, N, table.data(), layer, codes.data(), {}};
        const vlm::BlockSparsePlan plan = vlm::build_sparse_plan(sc, cv, Hq, kvl, scale);
        const vlm::BlockSparsePlan* pp = &plan;
        vlm::block_sparse_attention(q, Hq, kvl, ab, {&pp, 1}, scale, out.data());
        for (int h = 0; h < Hq; ++h) {
          double e = 0;
          for (int r = 0; r < N; ++r)
            for (int d = 0; d < D; ++d) {
              const size_t i = (static_cast<size_t>(r) * Hq + h) * D + d;
              e += std::pow(static_cast<double>(out[i]) - dense[i], 2);
            }
          const double err = std::sqrt(e / std::max(dnorm[h], 1e-30));
          const auto& hp = plan.heads[h];
          const double density = (hp.blocks.size() + hp.cols.size() / static_cast<double>(block)) / causal_blocks;
          if (err <= target && density < best_density[h]) {
            best[h] = static_cast<int>(ci);
            best_density[h] = density;
            best_err[h] = err;
          }
        }
      }
      result.layers[layer].resize(Hq);
      scores[layer].resize(Hq);
      for (int h = 0; h < Hq; ++h) {
        result.layers[layer][h] = cands[best[h]].pattern;
        scores[layer][h] = best_err[h];
      }
      std::fprintf(stderr, "\rlayer %d/%d [", layer + 1, L);
      for (int i = 0; i < L; ++i) std::fputc(i <= layer ? '#' : '.', stderr);
      std::fprintf(stderr, "]");
      std::fflush(stderr);
    };
    std::vector<float> logits;
    decoder->forward(fb, kv, logits);
    std::fprintf(stderr, "\n");
    std::map<std::string, int> counts;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        const auto& p = result.layers[l][h];
        for (const auto& c : cands)
          if (c.pattern.type == p.type && c.pattern.boundary == p.boundary) {
            ++counts[vlm::head_pattern_type_name(p.type) + std::string(p.boundary == vlm::BoundaryKind::None ? "" :
                                                                        p.boundary == vlm::BoundaryKind::Q ? "+q" : "+2d")];
            break;
          }
      }
    std::ofstream out(flags["out"]);
    if (!out) throw vlm::LoadError(flags["out"] + ": cannot write");
    out << vlm::sparse_patterns_to_json(result, cfg.architecture, scores) << "\n";
    if (!out) throw vlm::LoadError(flags["out"] + ": write failed");
    std::printf("wrote %s: %d layers x %d heads, %d calibration tokens, target error %.3g\n", flags["out"].c_str(), L,
                H, N, target);
    for (const auto& [k, n] : counts) std::printf("  %s: %d heads\n", k.c_str(), n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
