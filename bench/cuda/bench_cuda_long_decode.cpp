// bench_cuda_long_decode: whole decode steps of the GPU backend (CudaBackend: forward + greedy GPU
// sampling + ids back to the host) at long context, on a checkpoint (bench/cuda/methods_gpu.sh
// runs it on the Qwen2-7B-shaped random bf16 model):
//  sink:  one sequence at each --contexts length, dense against SinkRouter (default config, min
//         over the group, zero surrogate, layers 0-1 dense) with a constant tau bisected on the
//         router's own decisions (SinkRouterCounters) until --skip of the routed groups are sink
//         groups (random weights have no sinks; what vlm-calibrate-sink does for a target ratio).
//  lookm: the number of --lookm-context sequences whose blocks fit the cache sized by
//         --gpu-memory-utilization, uncompressed and at --lookm-ratio of the tokens (what LOOK-M
//         keeps at a 20 % budget), and the aggregate decode of --lookm-seqs sequences over a cache
//         of that compressed length (positions keep counting from the full length, as after LOOK-M)
//         against the uncompressed run (--lookm-seqs, or the largest batch that fits).
// Decode steps run as CUDA graphs on both sides (dense and routed; the line counts the steps that
// replayed one). No prefill of the long context: each sequence prefills 32 real tokens (its anchor among them,
// captured into its SinkAnchors there);
// the rest of its blocks hold whatever the pool holds (timing does not depend on the values).
// Usage: bench_cuda_long_decode --model DIR [--contexts 32768,131072,524288] [--skip 0.6]
//          [--steps 10] [--lookm-seqs 8] [--lookm-context 131072] [--lookm-ratio 0.2]
//          [--gpu-memory-utilization 0.9] [--part sink|lookm|all]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "kernels/core/log.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/methods/sink_anchors.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kB = 16, kPrompt = 32;

struct LongSeq {
  std::vector<int32_t> blocks;
  int32_t context = 0;   // cached tokens during the timed steps (this step's included)
  int32_t position = 0;  // RoPE position of the decode token
  vlm::SinkAnchors anchors;
};

struct Bench {
  vlm::CudaBackend& backend;
  int32_t next_block = 0;
  std::vector<int32_t> prompt;
  vlm::Sequence sampler_seq{0, {0}, [] { vlm::SamplingParams p; p.temperature = 0; return p; }()};

  // Sequences of `context` cached tokens (blocks for context + 1), their 32-token prompt prefilled.
  std::vector<LongSeq> make(int n, int32_t context, int32_t position) {
    next_block = 0;
    std::vector<LongSeq> seqs(static_cast<size_t>(n));
    std::vector<vlm::SequenceChunk> chunks;
    for (LongSeq& s : seqs) {
      for (int32_t i = 0; i < (context + kB - 1) / kB; ++i) s.blocks.push_back(next_block++);
      s.context = context;
      s.position = position;
      vlm::SequenceChunk c;
      c.token_ids = prompt;
      c.block_table = s.blocks;
      c.finishes_prefill = true;
      chunks.push_back(c);
    }
    VLM_CHECK(next_block <= backend.num_kv_blocks(), "{} blocks > the cache's {}", next_block, backend.num_kv_blocks());
    // With the anchor stores: the GPU captures each one's anchors at the end of its prefill.
    std::vector<vlm::SinkAnchors*> stores;
    for (LongSeq& s : seqs) stores.push_back(&s.anchors);
    static const vlm::SinkRouterConfig prefill_cfg;
    sink_cfg = &prefill_cfg;
    run(chunks, &stores, nullptr);
    return seqs;
  }
  // One decode step of every sequence (the same token at the same position each time); seconds.
  double step(std::vector<LongSeq>& seqs, const vlm::SinkRouterConfig* sink, vlm::SinkRouterCounters* counters) {
    static const int32_t token = 1000;
    std::vector<vlm::SequenceChunk> chunks;
    for (LongSeq& s : seqs) {
      vlm::SequenceChunk c;
      c.token_ids = std::span<const int32_t>(&token, 1);
      c.start_pos = s.context - 1;
      c.block_table = s.blocks;
      chunks.push_back(c);
    }
    std::vector<vlm::SinkAnchors*> stores;
    if (sink)
      for (LongSeq& s : seqs) stores.push_back(&s.anchors);
    const auto t0 = Clock::now();
    run(chunks, sink ? &stores : nullptr, counters, &seqs);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  void run(const std::vector<vlm::SequenceChunk>& chunks, std::vector<vlm::SinkAnchors*>* stores,
           vlm::SinkRouterCounters* counters, const std::vector<LongSeq>* seqs = nullptr) {
    vlm::ForwardBatch fb = vlm::make_forward_batch(chunks, kB);
    if (seqs)
      for (size_t i = 0; i < seqs->size(); ++i) fb.positions[i] = (*seqs)[i].position;
    if (stores) {
      fb.sink_anchors = *stores;
      fb.sink_router = sink_cfg;
      fb.sink_counters = counters;
    }
    backend.forward(fb, vlm::EmbeddingOverride{});
    std::vector<vlm::SampleTask> tasks;
    for (size_t i = 0; i < chunks.size(); ++i) tasks.push_back({&sampler_seq, static_cast<int64_t>(i)});
    std::vector<vlm::SampleResult> out;
    backend.sample(tasks, out);  // synchronizes
  }
  const vlm::SinkRouterConfig* sink_cfg = nullptr;
};

double median_step(Bench& b, std::vector<LongSeq>& seqs, int steps, const vlm::SinkRouterConfig* sink,
                   vlm::SinkRouterCounters* counters) {
  b.sink_cfg = sink;
  std::vector<double> t;
  for (int k = 0; k < steps + 2; ++k) {
    const double dt = b.step(seqs, sink, counters);
    if (k >= 2) t.push_back(dt);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<int64_t> list(const std::string& s) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < s.size();) {
    const size_t j = s.find(',', i);
    out.push_back(std::stoll(s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f = {{"contexts", "32768,131072,524288"}, {"skip", "0.6"}, {"steps", "10"},
                                          {"lookm-seqs", "8"}, {"lookm-context", "131072"}, {"lookm-ratio", "0.2"},
                                          {"gpu-memory-utilization", "0.9"}, {"part", "all"}};
  for (int i = 1; i + 1 < argc; i += 2) f[std::string(argv[i]).substr(2)] = argv[i + 1];
  if (!f.count("model")) {
    std::fprintf(stderr, "usage: bench_cuda_long_decode --model DIR [--contexts ..] [--skip 0.6] [--steps 10] ...\n");
    return 2;
  }
  try {
    vlm::set_log_level("warn");
    auto host = vlm::LlmDecoder::load(f["model"]);
    vlm::CudaDecoderOptions o;
    o.dtype = vlm::DType::BF16;
    o.block_size = kB;
    o.gpu_memory_utilization = std::stod(f["gpu-memory-utilization"]);
    o.max_tokens_per_step = 1024;
    o.max_logit_rows = 64;
    vlm::CudaBackend backend(*host, o, {});
    const int64_t blocks = backend.num_kv_blocks();
    std::printf("GPU %s; weights %.2f GiB; KV cache %ld blocks of %d tokens (%.2f GiB) at --gpu-memory-utilization %s\n",
                vlm::cuda::describe_gpu(0).c_str(), double(backend.decoder().weight_bytes()) / (1 << 30),
                static_cast<long>(blocks), kB, double(blocks * backend.kv_bytes_per_block()) / (1 << 30),
                f["gpu-memory-utilization"].c_str());
    Bench b{backend};
    for (int i = 0; i < kPrompt; ++i) b.prompt.push_back(100 + 37 * i);
    const int steps = static_cast<int>(std::stoll(f["steps"]));
    const int num_layers = static_cast<int>(host->config().num_layers), Hkv = static_cast<int>(host->config().num_kv_heads);

    if (f["part"] != "lookm")
      for (int64_t L : list(f["contexts"])) {
        auto seqs = b.make(1, static_cast<int32_t>(L), static_cast<int32_t>(L - 1));
        const int64_t g0 = backend.decoder().graph_launches();
        const double dense = median_step(b, seqs, steps, nullptr, nullptr);
        const int64_t dense_graphs = backend.decoder().graph_launches() - g0;
        // Bisect a constant tau until the step's skipped share of routed groups is the target.
        vlm::SinkRouterConfig cfg;
        const double target = std::stod(f["skip"]);
        double lo = -1.0, hi = 1.0, share = 0;
        vlm::SinkRouterCounters c;
        for (int it = 0; it < 16; ++it) {
          cfg.c0 = 0.5 * (lo + hi);
          c = {};
          b.sink_cfg = &cfg;
          b.step(seqs, &cfg, &c);
          share = double(c.groups_skipped) / double(c.groups_routed);
          if (std::abs(share - target) < 0.5 / double(c.groups_routed)) break;
          (share > target ? lo : hi) = cfg.c0;  // more skipped than wanted: raise tau
        }
        c = {};
        const int64_t g1 = backend.decoder().graph_launches();
        const double routed = median_step(b, seqs, steps, &cfg, &c);
        const int64_t routed_graphs = backend.decoder().graph_launches() - g1;
        const double per_step = double(c.groups_skipped) / double(steps + 2);
        std::printf("sink ctx=%ld tau=%.4f skipped=%.1f%% of routed (%.1f of %d groups a step, %d layers x %d) "
                    "dense_ms=%.3f routed_ms=%.3f speedup=%.2f graph_steps dense=%ld routed=%ld of %d\n",
                    static_cast<long>(L), cfg.c0, 100.0 * double(c.groups_skipped) / double(c.groups_routed), per_step,
                    (num_layers - cfg.num_dense_layers) * Hkv, num_layers, Hkv, 1e3 * dense, 1e3 * routed, dense / routed,
                    static_cast<long>(dense_graphs), static_cast<long>(routed_graphs), steps + 2);
      }

    if (f["part"] != "sink") {
      const auto full = static_cast<int32_t>(std::stoll(f["lookm-context"]));
      const auto kept = static_cast<int32_t>(std::lround(full * std::stod(f["lookm-ratio"])));
      const int64_t per_full = (full + kB) / kB, per_kept = (kept + kB) / kB;  // context + the decode token
      const int64_t fit_full = blocks / per_full, fit_kept = blocks / per_kept;
      const double gib = double(backend.kv_bytes_per_block()) / (1 << 30);
      std::printf("lookm fit: %ld sequences of %d tokens uncompressed (%.2f GiB of KV each), %ld compressed to %d "
                  "tokens (%.2f GiB each, %.1f%% fewer bytes) (%.1fx)\n",
                  static_cast<long>(fit_full), full, per_full * gib, static_cast<long>(fit_kept), kept, per_kept * gib,
                  100.0 * (1.0 - double(per_kept) / double(per_full)),
                  double(fit_kept) / double(std::max<int64_t>(1, fit_full)));
      const int want = static_cast<int>(std::stoll(f["lookm-seqs"]));
      const int n_full = static_cast<int>(std::min<int64_t>(want, fit_full));
      auto comp = b.make(want, kept, full - 1);
      const double t_kept = median_step(b, comp, steps, nullptr, nullptr);
      comp.clear();
      auto unc = b.make(n_full, full, full - 1);
      const double t_full = median_step(b, unc, steps, nullptr, nullptr);
      const double tps_kept = want / t_kept, tps_full = n_full / t_full;
      std::printf("lookm decode: compressed %d x %d tokens %.3f ms/step %.1f tok/s; uncompressed %d x %d tokens %.3f "
                  "ms/step %.1f tok/s%s; aggregate speedup %.2f\n",
                  want, kept, 1e3 * t_kept, tps_kept, n_full, full, 1e3 * t_full, tps_full,
                  n_full < want ? " (the largest batch that fits)" : "", tps_kept / tps_full);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_long_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
