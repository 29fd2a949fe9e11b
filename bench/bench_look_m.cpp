// LOOK-M at long multimodal context, Qwen2-0.5B attention shapes (24 layers, H=14, Hkv=2, D=64),
// bf16 paged KV cache, block 16, on the global pool (2 threads or VLM_BENCH_THREADS).
// For each context S (default 8192 and 32768; argv overrides) — 16 text tokens, then image
// tokens, with a 64-token text question at the end — side by side in one run:
//   - KV bytes of the sequence: full cache vs LOOK-M at 20% (text-prior-pivot, window scores);
//   - decode attention time per token over all 24 layers (paged_attention, one query row),
//     full vs compressed, median of repeated passes interleaved between the two;
//   - the one-time compression cost at the end of prefill (window scores + select + merge +
//     compaction, all 24 layers).
// Random K/V: timing does not depend on the values. Prints a Markdown table for RESULTS.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention/paged_attention.h"
#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_compaction.h"
#include "kernels/core/thread_pool.h"

using namespace vlm;

namespace {

constexpr int kLayers = 24, kH = 14, kHkv = 2, kD = 64, kB = 16;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Layers {
  std::vector<std::vector<uint16_t>> k, v;
  std::vector<PagedKVLayer> kv;
  Layers(int64_t num_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const int64_t elems = num_blocks * kHkv * kB * kD;
    // A random bf16 pattern, tiled with a per-layer shift (values do not affect timing).
    std::vector<float> tmp((1 << 16) + 1024);
    for (float& x : tmp) x = nd(rng);
    std::vector<uint16_t> pat(tmp.size());
    convert_from_f32(tmp.data(), DType::BF16, pat.data(), int64_t(tmp.size()));
    k.resize(kLayers);
    v.resize(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      k[l].resize(elems);
      v[l].resize(elems);
      for (int64_t i = 0; i < elems; i += 1 << 16) {
        const int64_t n = std::min<int64_t>(1 << 16, elems - i);
        std::copy_n(pat.begin() + (i / 7 + l) % 1024, n, k[l].begin() + i);
        std::copy_n(pat.begin() + (i / 3 + 2 * l) % 1024, n, v[l].begin() + i);
      }
      PagedKVLayer p;
      p.k = k[l].data();
      p.v = v[l].data();
      p.dtype = DType::BF16;
      p.num_blocks = num_blocks;
      p.block_size = kB;
      p.num_kv_heads = kHkv;
      p.head_dim = kD;
      kv.push_back(p);
    }
  }
};

// Seconds per decode token over all layers (one query row at context ctx).
double decode_pass(const Layers& L, const std::vector<int32_t>& table, int32_t ctx, const std::vector<float>& q,
                   std::vector<float>& out) {
  const int32_t cu[2] = {0, 1};
  AttentionBatch b;
  b.num_seqs = 1;
  b.cu_seqlens_q = cu;
  b.context_lens = &ctx;
  b.block_tables = table.data();
  b.max_blocks_per_seq = static_cast<int>(table.size());
  const double t0 = now();
  for (int l = 0; l < kLayers; ++l) paged_attention(q.data(), kH, L.kv[l], b, 0.125f, out.data());
  return now() - t0;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> contexts = {8192, 32768};
  if (argc > 1) {
    contexts.clear();
    for (int i = 1; i < argc; ++i) contexts.push_back(std::atoi(argv[i]));
  }
  std::printf("threads: %d\n\n", global_thread_pool().num_threads());
  std::printf("| context | KV full | KV LOOK-M 20%% | KV saved | decode attn full (ms/token, 24 layers) | LOOK-M | speed-up | "
              "compression once (ms, 24 layers) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int S : contexts) {
    const int64_t nb = (S + kB - 1) / kB + 8;
    Layers full(nb, 1), comp(nb, 1);
    std::vector<int32_t> table(nb - 8);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(5));
    std::vector<uint8_t> is_text(S, 0);
    for (int j = 0; j < 16; ++j) is_text[j] = 1;
    for (int j = S - 64; j < S; ++j) is_text[j] = 1;
    LookMParams p;  // text-prior-pivot, 10% + 10%, window scores W = 64
    // Compression: window scores from the last 64 query rows, then compaction, per layer.
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    std::vector<float> qw(size_t(p.window) * kH * kD);
    for (float& x : qw) x = nd(rng);
    std::vector<float> scores(size_t(kHkv) * S);
    int32_t kept = S;
    const double t0 = now();
    for (int l = 0; l < kLayers; ++l) {
      std::fill(scores.begin(), scores.end(), 0.0f);
      accumulate_attention_scores(qw.data(), p.window, kH, comp.kv[l], table.data(), S - p.window, 0.125f,
                                  scores.data(), S);
      kept = compact_sequence_kv(comp.kv[l], table.data(), S, scores.data(), S, is_text.data(), p);
    }
    const double t_comp = now() - t0;
    const std::vector<int32_t> kept_table(table.begin(), table.begin() + (kept + kB - 1) / kB);
    std::vector<float> q(size_t(kH) * kD), out(q.size());
    for (float& x : q) x = nd(rng);
    std::vector<double> tf, tc;
    for (int rep = 0; rep < 15; ++rep) {  // interleaved
      tf.push_back(decode_pass(full, table, S, q, out));
      tc.push_back(decode_pass(comp, kept_table, kept, q, out));
    }
    const double bytes_per_token = 2.0 * kLayers * kHkv * kD * 2;  // K and V, bf16
    const double kv_full = bytes_per_token * S, kv_comp = bytes_per_token * kept;
    std::printf("| %d | %.1f MiB | %.1f MiB (%d tokens) | %.0f%% | %.2f | %.2f | %.2fx | %.0f |\n", S,
                kv_full / (1 << 20), kv_comp / (1 << 20), kept, 100.0 * (1 - kv_comp / kv_full), median(tf) * 1e3,
                median(tc) * 1e3, median(tf) / median(tc), t_comp * 1e3);
    std::fflush(stdout);
  }
}
