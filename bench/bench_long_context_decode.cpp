// Whole decode steps at long context, without prefill (issues 10 and 11, speed bullets).
//
// Prefilling 8K-128K tokens through a 0.5B model on two cores takes minutes to hours, and decode
// speed does not depend on how the cache was filled. So for each context L this harness:
//  1. allocates the paged KV cache as the engine does (engine/scheduling/kv_cache.h; the engine's default
//     block size and KV dtype, EngineConfig: 16 and bf16), one sequence per variant, its blocks
//     in a shuffled order (an engine after some churn);
//  2. fills every layer's K/V for L prompt tokens with synthetic data (uniform in [-1, 1), a fast
//     PRNG; the first token's value is scaled by 0.01: a near-zero sink value, as in the
//     structured SinkRouter tests);
//  3. LOOK-M: a second sequence with the same content is compressed with the real kernels (window
//     scores of 64 synthetic query rows, text-prior-pivot selection and merge, compaction into the
//     first slots; 16 text tokens, image tokens, a 64-token text question) to the 20% budget, and
//     its block table trimmed; above --compress-max (default 32768; the O(L^2) merge takes minutes
//     at 128K) the compacted cache of budget(L) tokens is written directly instead (the decode step
//     reads the same bytes either way). The decode token keeps its logical position L (RoPE).
//  4. SinkRouter: anchors captured from the cache by SinkRouterAttention::capture_anchors, as the
//     engine does at the last prefill chunk.
// Then it times, interleaved in rounds (the starting variant rotates), medians of --reps:
//  - whole decode steps: LlmDecoder::forward for one token at position L (all layers, weights,
//    final norm, LM head logits; no sampling), every variant re-decoding the same token at the
//    same position (its own K/V slot is rewritten each time, so every repeat does identical work):
//      full       the exact path over L+1 cached tokens;
//      look-m     the compacted cache (budget(L) + 1 tokens);
//      routed r%  SinkRouter with tau chosen so that the router, on this step's real queries,
//                 skips round(r * routed groups) of the (layers >= 2) x Hkv groups. Random weights
//                 have no sinks, so tau is bisected on the router's own decisions (counted by
//                 SinkRouterCounters), the procedure vlm-calibrate-sink runs for a target ratio;
//                 routed 0% uses the default config (tau = 0.5), which skips ~nothing here.
//  - the decode-attention path alone (AttentionLayer::forward for every layer: write this token's
//    K/V, then dense paged attention or routing + group-skipping kernel), with synthetic query
//    rows; for the routed variants the same count of groups is *planted* (every query head of a
//    planted group = 4 x its anchor key + noise, cosine ~0.9; others random, cosine ~0) and the
//    default router (tau = 0.5, min over the group) decides, as bench_sink_router.cpp does.
// Reports per step: time, tokens/s, ratio to full, KV bytes read, skip ratio, implied bandwidth.
//
// Usage: bench_long_context_decode --model DIR [--contexts 8192,32768,131072] [--reps 5]
//          [--threads 2] [--variants full,look-m,routed] [--skip-ratios 0,40,60,80]
//          [--compress-max 32768] [--attention-reps N] [--check 1]
// --check 1 (the ctest smoke run): exit 1 unless LOOK-M kept exactly its budget, the planted
// attention-path runs skipped exactly their target and the whole-step runs within one group of
// it (no timing is checked).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "engine/scheduling/kv_cache.h"
#include "kernels/attention/paged_attention.h"
#include "kernels/core/check.h"
#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_compaction.h"
#include "kernels/kv_compression/look_m_params.h"
#include "kernels/sink_router/sink_router_config.h"
#include "kernels/core/thread_pool.h"
#include "model/decoder/attention_layer.h"
#include "model/decoder/forward_batch.h"
#include "model/decoder/llm_decoder.h"
#include "model/methods/sink_anchors.h"
#include "model/methods/sink_router_attention.h"
#include "bench/common/bench_util.h"
#include "bench/common/long_context_cache.h"

using namespace vlm;
using namespace vlm::bench;

namespace {

struct Options {
  std::string model;
  std::vector<int> contexts = {8192, 32768, 131072};
  std::vector<int> skip_ratios = {0, 40, 60, 80};
  std::vector<std::string> variants = {"full", "look-m", "routed"};
  int reps = 5, attention_reps = -1, threads = 2, compress_max = 32768;
  bool check = false;  // exit 1 unless the budget and skip counts come out as requested
  bool has(const std::string& v) const { return std::find(variants.begin(), variants.end(), v) != variants.end(); }
};

struct Variant {
  std::string name;
  const Seq* seq = nullptr;
  bool routed = false;
  int target_skip = 0;         // routed groups to skip per step
  SinkRouterConfig step_cfg;   // whole step: tau bisected on the model's queries
  SinkRouterConfig attn_cfg;   // attention path: default tau, planted queries
  std::vector<float> attn_q;   // [layers, H, D] attention-path query rows
  double tau = 0;
  std::vector<double> step_s, attn_s, step_cpu, attn_cpu;
  int64_t step_skipped = -1, attn_skipped = -1;  // groups skipped per step (checked constant)
  bool skip_varied = false;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--contexts") o.contexts = parse_ints(v);
    else if (a == "--skip-ratios") o.skip_ratios = parse_ints(v);
    else if (a == "--reps") o.reps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--attention-reps") o.attention_reps = std::atoi(v.c_str());
    else if (a == "--threads") o.threads = std::max(1, std::atoi(v.c_str()));
    else if (a == "--compress-max") o.compress_max = std::atoi(v.c_str());
    else if (a == "--check") o.check = v == "1" || v == "on";
    else if (a == "--variants") {
      o.variants.clear();
      std::stringstream ss(v);
      for (std::string s; std::getline(ss, s, ',');) o.variants.push_back(s);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.model.empty()) {
    std::fprintf(stderr,
                 "usage: bench_long_context_decode --model DIR [--contexts 8192,32768,131072] [--reps 5] "
                 "[--threads 2] [--variants full,look-m,routed] [--skip-ratios 0,40,60,80] [--compress-max N]\n");
    return 2;
  }
  if (o.attention_reps < 0) o.attention_reps = o.reps;
  set_num_threads(o.threads);

  const std::unique_ptr<LlmDecoder> dec = LlmDecoder::load(o.model);
  const ModelConfig& mc = dec->config();
  const int NL = static_cast<int>(mc.num_layers), H = static_cast<int>(mc.num_heads);
  const int Hkv = static_cast<int>(mc.num_kv_heads), D = static_cast<int>(mc.head_dim);
  const EngineConfig ec;  // the engine's defaults: block size, KV dtype
  const int B = ec.block_size;
  const DType kv_dtype = ec.kv_dtype;
  const double esize = static_cast<double>(dtype_size(kv_dtype));
  const double kv_token_bytes = 2.0 * NL * Hkv * D * esize;  // K + V, all layers
  // Weights read per step: everything except the embedding table when the LM head is separate
  // (one embedding row is looked up); tied: the table is the LM head and is read whole.
  double weight_bytes = static_cast<double>(dec->weights().total_bytes());
  if (!mc.tie_word_embeddings) weight_bytes -= static_cast<double>(mc.vocab_size) * mc.hidden_size * 2.0;
  const LookMParams look_m;  // text-prior-pivot, 10% recent + 10% important, window scores
  const SinkRouterConfig sink_default;  // tau = 0.5, min over the group, layers < 2 dense
  const int routed_groups = std::max(0, NL - sink_default.num_dense_layers) * Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  std::printf("model %s: %d layers, H %d, Hkv %d, D %d, vocab %lld, %.1f MiB weights; KV %s, block %d; "
              "%d threads; reps %d (attention %d)\n",
              o.model.c_str(), NL, H, Hkv, D, static_cast<long long>(mc.vocab_size),
              static_cast<double>(dec->weights().total_bytes()) / (1 << 20), dtype_name(kv_dtype), B,
              global_thread_pool().num_threads(), o.reps, o.attention_reps);

  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "check failed: %s\n", what.c_str());
    ++failures;
  };
  const int32_t token = static_cast<int32_t>(std::min<int64_t>(1000, mc.vocab_size - 1));
  for (const int L : o.contexts) {
    VLM_CHECK(L >= 2, "context {} too short", L);
    const double t_setup = now();
    // Blocks: the full sequence (L + 1 slots); LOOK-M (L + 1 before compression, or budget + 1).
    const LookMBudget budget = look_m_budget(look_m, L);
    const bool want_look_m = o.has("look-m");
    const bool compress = want_look_m && L <= o.compress_max;
    const int64_t full_blocks = (L + 1 + B - 1) / B;
    const int32_t direct_len = std::min<int32_t>(budget.kept(), L);
    const int64_t lm_blocks = want_look_m ? (compress ? full_blocks : (direct_len + 1 + B - 1) / B) : 0;
    KVCacheShape shape;
    shape.num_layers = NL;
    shape.num_blocks = full_blocks + lm_blocks;
    shape.block_size = B;
    shape.num_kv_heads = Hkv;
    shape.head_dim = D;
    shape.dtype = kv_dtype;
    KVCache cache(shape);
    std::vector<int32_t> perm(static_cast<size_t>(shape.num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
    Seq full, lm;
    full.table.assign(perm.begin(), perm.begin() + full_blocks);
    full.cache_len = L;
    full.position = L;
    fill_kv(cache, full, L, 1);
    const double t_fill = now() - t_setup;
    double t_compress = 0;
    if (want_look_m) {
      lm.table.assign(perm.begin() + full_blocks, perm.end());
      lm.position = L;
      if (compress) {
        fill_kv(cache, lm, L, 1);  // the same content as the full sequence
        const double t0 = now();
        lm.cache_len = compress_look_m(cache, lm, L, H, look_m);
        t_compress = now() - t0;
      } else {
        fill_kv(cache, lm, direct_len, 1);  // the compacted cache, written directly
        lm.cache_len = direct_len;
      }
      lm.table.resize((lm.cache_len + 1 + B - 1) / B);  // the engine trims the tail blocks
    }
    // SinkRouter anchors, captured from the cache as at the last prefill chunk.
    SinkAnchors anchors;
    {
      ForwardBatch cap = decode_batch(full, B, token);
      cap.finishes_prefill[0] = 1;
      cap.sink_anchors = {&anchors};
      cap.sink_router = &sink_default;
      for (int l = 0; l < NL; ++l) SinkRouterAttention::capture_anchors(l, cache.layers()[l], cap);
    }
    std::printf("\n## context %d: KV full %.1f MiB (%d tokens), LOOK-M %s %.1f MiB (%d tokens, %s), "
                "setup %.1f s (fill), %.1f s (LOOK-M compression)\n",
                L, kv_token_bytes * (L + 1) / (1 << 20), L + 1, want_look_m ? "" : " (off)",
                kv_token_bytes * (lm.cache_len + 1) / (1 << 20), lm.cache_len + 1,
                compress ? "real compression kernels" : "compacted cache written directly", t_fill, t_compress);
    std::fflush(stdout);

    // Variants.
    std::vector<Variant> vars;
    std::mt19937 qrng(11);
    std::normal_distribution<float> nd;
    auto random_q = [&] {
      std::vector<float> q(static_cast<size_t>(NL) * H * D);
      for (float& x : q) x = nd(qrng);
      return q;
    };
    const std::vector<float> base_q = random_q();
    auto variant = [&](const std::string& name, const Seq* seq) {
      Variant v;
      v.name = name;
      v.seq = seq;
      v.attn_q = base_q;
      return v;
    };
    if (o.has("full")) vars.push_back(variant("full", &full));
    if (want_look_m) vars.push_back(variant("look-m 20%", &lm));
    if (o.has("routed"))
      for (int r : o.skip_ratios) {
        Variant v = variant("routed " + std::to_string(r) + "%", &full);
        v.routed = true;
        v.target_skip = static_cast<int>(std::lround(r / 100.0 * routed_groups));
        // Attention path: plant target_skip of the routed groups, spread evenly.
        const int G = H / Hkv;
        for (int i = 0; i < routed_groups; ++i) {
          if ((i + 1) * v.target_skip / routed_groups == i * v.target_skip / routed_groups) continue;
          const int l = sink_default.num_dense_layers + i / Hkv, g = i % Hkv;
          const float* a = anchors.k_layer(l) + static_cast<size_t>(g) * D;
          for (int h = g * G; h < (g + 1) * G; ++h)
            for (int d = 0; d < D; ++d)
              v.attn_q[(static_cast<size_t>(l) * H + h) * D + d] = 4.0f * a[d] + 0.3f * nd(qrng);
        }
        v.attn_cfg = sink_default;
        v.step_cfg = sink_default;
        vars.push_back(std::move(v));
      }

    std::vector<float> logits;
    SinkRouterCounters counters;
    // One whole decode step of variant v with router config cfg; returns seconds, sets skipped.
    auto run_step = [&](const Variant& v, const SinkRouterConfig* cfg, int64_t* skipped) {
      ForwardBatch fb = decode_batch(*v.seq, B, token);
      counters = {};
      if (cfg) {
        fb.sink_anchors = {&anchors};
        fb.sink_router = cfg;
        fb.sink_counters = &counters;
      }
      const double t0 = now(), c0 = cpu_now();
      dec->forward(fb, cache.layers(), logits);
      const Timing t{now() - t0, cpu_now() - c0};
      if (skipped) *skipped = counters.groups_skipped;
      return t;
    };
    // The attention path of one decode token over every layer (AttentionLayer, as the decoder
    // calls it), with the variant's query rows.
    std::vector<float> tok_k(static_cast<size_t>(Hkv) * D, 0.1f), tok_v(tok_k.size(), 0.1f);
    std::vector<float> attn_out(static_cast<size_t>(H) * D);
    const AttentionLayer attention;
    auto run_attention = [&](const Variant& v, int64_t* skipped) {
      ForwardBatch fb = decode_batch(*v.seq, B, token);
      counters = {};
      if (v.routed) {
        fb.sink_anchors = {&anchors};
        fb.sink_router = &v.attn_cfg;
        fb.sink_counters = &counters;
      }
      const double t0 = now(), c0 = cpu_now();
      for (int l = 0; l < NL; ++l)
        attention.forward(l, v.attn_q.data() + static_cast<size_t>(l) * H * D, tok_k.data(), tok_v.data(), H,
                          cache.layers()[l], fb, scale, attn_out.data());
      const Timing t{now() - t0, cpu_now() - c0};
      if (skipped) *skipped = counters.groups_skipped;
      return t;
    };

    // Whole-step tau for each routed variant: bisect until the router skips target_skip groups.
    for (Variant& v : vars) {
      if (!v.routed) continue;
      if (v.target_skip == 0) {  // the default router (tau = 0.5)
        v.tau = v.step_cfg.threshold(L + 1);
        continue;
      }
      double lo = -1.0, hi = 1.01, best_tau = 0;
      int64_t best = -1;
      for (int it = 0; it < 30; ++it) {
        const double mid = 0.5 * (lo + hi);
        SinkRouterConfig cfg = sink_default;
        cfg.c0 = mid;
        int64_t n = 0;
        run_step(v, &cfg, &n);
        if (best < 0 || std::llabs(n - v.target_skip) < std::llabs(best - v.target_skip)) {
          best = n;
          best_tau = mid;
        }
        if (n == v.target_skip) break;
        (n > v.target_skip ? lo : hi) = mid;  // too many skipped: raise tau
      }
      v.tau = best_tau;
      v.step_cfg.c0 = best_tau;
    }

    // Warm-up, then interleaved rounds with a rotating start.
    for (const Variant& v : vars) run_step(v, v.routed ? &v.step_cfg : nullptr, nullptr);
    const int rounds = std::max(o.reps, o.attention_reps);
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < vars.size(); ++i) {
        Variant& v = vars[(i + r) % vars.size()];
        if (r < o.reps) {
          int64_t n = 0;
          const Timing t = run_step(v, v.routed ? &v.step_cfg : nullptr, &n);
          v.step_s.push_back(t.wall);
          v.step_cpu.push_back(t.cpu);
          if (v.step_skipped >= 0 && n != v.step_skipped) v.skip_varied = true;
          v.step_skipped = n;
        }
        if (r < o.attention_reps) {
          int64_t n = 0;
          const Timing t = run_attention(v, &n);
          v.attn_s.push_back(t.wall);
          v.attn_cpu.push_back(t.cpu);
          if (v.attn_skipped >= 0 && n != v.attn_skipped) v.skip_varied = true;
          v.attn_skipped = n;
        }
      }
    }

    // Report.
    const Variant* ref = nullptr;
    for (const Variant& v : vars)
      if (v.name == "full") ref = &v;
    auto kv_read = [&](const Variant& v, int64_t skipped) {
      const double ctx = v.seq->cache_len + 1;
      return (static_cast<double>(NL) * Hkv - std::max<int64_t>(skipped, 0)) * ctx * D * 2.0 * esize;
    };
    std::printf("\nWhole decode step (LlmDecoder::forward, 1 token, logits; median of %d; weights read %.0f MiB):\n\n",
                o.reps, weight_bytes / (1 << 20));
    std::printf("| L | variant | KV tokens | step ms (wall median) | wall min | CPU ms (median) | tokens/s (wall) | "
                "x full (wall) | x full (CPU) | KV MiB read | skipped (routed groups) | tau | GB/s (KV + weights, wall) | GB per CPU-s |\n"
                "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Variant& v : vars) {
      const double m = median(v.step_s), mn = *std::min_element(v.step_s.begin(), v.step_s.end());
      const int64_t sk = v.routed ? v.step_skipped : 0;
      const double bytes = kv_read(v, sk);
      char skip[64] = "-", tau[32] = "-";
      if (v.routed) {
        std::snprintf(skip, sizeof skip, "%lld/%d (%.1f%%)%s", static_cast<long long>(sk), routed_groups,
                      100.0 * sk / std::max(1, routed_groups), v.skip_varied ? " varied!" : "");
        std::snprintf(tau, sizeof tau, "%.4f", v.tau);
      }
      const double mc = median(v.step_cpu);
      std::printf("| %d | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %s | %s | %.1f | %.1f |\n", L,
                  v.name.c_str(), v.seq->cache_len + 1, m * 1e3, mn * 1e3, mc * 1e3, 1.0 / m,
                  ref ? median(ref->step_s) / m : 0.0, ref ? median(ref->step_cpu) / mc : 0.0, bytes / (1 << 20), skip,
                  tau, (bytes + weight_bytes) / m / 1e9, (bytes + weight_bytes) / mc / 1e9);
    }
    std::printf("\nDecode-attention path (AttentionLayer::forward over %d layers, synthetic queries, planted sinks; "
                "median of %d):\n\n",
                NL, o.attention_reps);
    std::printf("| L | variant | attention ms (wall median) | wall min | CPU ms (median) | x full (wall) | x full (CPU) | "
                "KV MiB read | skipped (routed groups) | GB/s (wall) | GB per CPU-s |\n"
                "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Variant& v : vars) {
      if (v.attn_s.empty()) continue;
      const double m = median(v.attn_s), mn = *std::min_element(v.attn_s.begin(), v.attn_s.end());
      const int64_t sk = v.routed ? v.attn_skipped : 0;
      const double bytes = kv_read(v, sk);
      char skip[64] = "-";
      if (v.routed)
        std::snprintf(skip, sizeof skip, "%lld/%d (%.1f%%)", static_cast<long long>(sk), routed_groups,
                      100.0 * sk / std::max(1, routed_groups));
      const double mc = median(v.attn_cpu);
      const bool r = ref && !ref->attn_s.empty();
      std::printf("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %s | %.1f | %.1f |\n", L, v.name.c_str(),
                  m * 1e3, mn * 1e3, mc * 1e3, r ? median(ref->attn_s) / m : 0.0, r ? median(ref->attn_cpu) / mc : 0.0,
                  bytes / (1 << 20), skip, bytes / m / 1e9, bytes / mc / 1e9);
    }
    std::fflush(stdout);
    if (o.check) {
      if (want_look_m && lm.cache_len != direct_len)
        fail("L=" + std::to_string(L) + ": LOOK-M kept " + std::to_string(lm.cache_len) + ", budget " +
             std::to_string(direct_len));
      for (const Variant& v : vars) {
        if (!v.routed) continue;
        if (v.attn_skipped != v.target_skip || v.skip_varied)
          fail("L=" + std::to_string(L) + " " + v.name + ": attention path skipped " + std::to_string(v.attn_skipped) +
               " of target " + std::to_string(v.target_skip));
        if (v.target_skip > 0 && std::llabs(v.step_skipped - v.target_skip) > 1)
          fail("L=" + std::to_string(L) + " " + v.name + ": whole step skipped " + std::to_string(v.step_skipped) +
               " of target " + std::to_string(v.target_skip));
      }
      for (float x : logits)
        if (!std::isfinite(x)) {
          fail("non-finite logits");
          break;
        }
    }
  }
  return failures ? 1 : 0;
}
