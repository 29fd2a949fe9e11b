// bench_cuda_sparse_ttft: time to first token of one long video-structured prompt through the GPU
// decoder, dense CUDA path vs sparse prefill (issue 22's end-to-end figure), with chunked prefill.
// The prompt: a 200-token text prefix, then frames of --frame-tokens video tokens (the layout of
// bench_sparse_prefill --video; Qwen2-VL's 256 tokens per 448x448 frame), as token ids drawn at
// random with their modality tags (text / video) and the frame stride known to the grid search
// (ForwardBatch::frame_strides, as the engine passes a video's tokens per frame). The vision
// tower is not in the timing and the embeddings are the random model's token embeddings, so the
// model's attention has no planted frame structure: the grid search decides on what it sees, and
// the line reports the plan's density (computed / causal key blocks) next to the time.
// TTFT: from the first chunk's forward to the greedy token of the last row on the host (every
// chunk enqueued back to back; the first sparse chunk syncs once per layer for the grid search's
// layouts, later chunks of the device-planned path not at all).
// One warm-up prompt (--warmup tokens, every mode) first. The sparse modes print their last row's
// logits' relative L2 distance from the dense mode's when dense ran first on the same prompt.
// Modes: dense; mminference (the defaults: the grid search on the prompt's first chunk only, its
// layouts reused by the later chunks, grid_search_once; long work items of the block-sparse
// kernel split along the keys); mminference-chunk (the grid search on every chunk);
// mminference-nosplit (the defaults without splitting long items: set_block_sparse_split(-1));
// mminference-once: another name of mminference (the mode's name before it was the default);
// xattention: XAttention (stride 8, threshold --xattention-threshold, default 0.9), estimated on the GPU.
// Usage: bench_cuda_sparse_ttft --model DIR [--lengths 131072] [--modes dense,mminference,mminference-chunk]
//          [--chunk 8192] [--frame-tokens 256] [--grid-stride 0] [--hline 1] [--warmup 16384] [--dense-max N]
// --dense-max N: the dense mode only for prompts of at most N tokens.
// --hline 0: the grid heads without horizontal lines (Table 3's "use hline" switch): no query
// block attends every key, so no chunk's kernel waits on one CTA walking all the keys.
// --grid-stride S > 0: MMInference's grid heads with the fixed stride S (as a searched pattern
// file would give a video model) instead of the online search.
// --sparse-prefill-config FILE: the MMInference modes take their per-head patterns from FILE
// (vlm-search-patterns' output; heads it leaves out keep the default grid head).
// With VLM_CUDA_PROFILE=1 every step prints its per-op GPU time to stderr (StepProfiler).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "kernels/core/log.h"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/methods/sparse_patterns_file.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPrefix = 200;

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> f = {{"lengths", "131072"}, {"modes", "dense,mminference"}, {"chunk", "8192"},
                                          {"xattention-threshold", "0.9"}, {"frame-tokens", "256"}, {"grid-stride", "0"},
                                          {"warmup", "16384"}, {"dense-max", "1099511627776"}, {"hline", "1"},
                                          {"sparse-prefill-config", ""}};
  for (int i = 1; i + 1 < argc; i += 2) f[std::string(argv[i]).substr(2)] = argv[i + 1];
  if (!f.count("model")) {
    std::fprintf(stderr, "usage: bench_cuda_sparse_ttft --model DIR [--lengths 131072] [--modes dense,mminference] "
                         "[--chunk 8192] [--frame-tokens 256] [--grid-stride 0] [--warmup 16384]\n");
    return 2;
  }
  try {
    vlm::set_log_level("info");
    std::vector<int64_t> lengths;
    for (const auto& w : words(f["lengths"])) lengths.push_back(std::stoll(w));
    const std::vector<std::string> modes = words(f["modes"]);
    const int64_t chunk = std::stoll(f["chunk"]), warmup = std::stoll(f["warmup"]);
    const int32_t frame = std::stoi(f["frame-tokens"]);
    const int64_t dense_max = std::stoll(f["dense-max"]);
    const int B = 16;
    int64_t longest = warmup;
    for (int64_t l : lengths) longest = std::max(longest, l);

    auto host = vlm::LlmDecoder::load(f["model"]);
    vlm::CudaDecoderOptions o;
    o.dtype = vlm::DType::BF16;
    o.block_size = B;
    o.num_kv_blocks = (longest + B - 1) / B + 1;
    o.max_tokens_per_step = chunk;
    o.max_logit_rows = 64;
    const auto t_load = Clock::now();
    vlm::CudaBackend backend(*host, o, {});
    std::printf("load: %.1f s (%.2f GiB of weights, %.2f GiB of KV cache on %s)\n",
                std::chrono::duration<double>(Clock::now() - t_load).count(),
                static_cast<double>(backend.decoder().weight_bytes()) / (1 << 30),
                static_cast<double>(backend.decoder().kv_bytes_per_block() * o.num_kv_blocks) / (1 << 30),
                vlm::cuda::describe_gpu(0).c_str());

    vlm::SparsePrefillConfig mm;
    mm.method = vlm::SparsePrefillMethod::MMInference;  // default head: grid (online search)
    mm.default_head.grid.stride = std::stoi(f["grid-stride"]);
    mm.default_head.grid.use_hline = f["hline"] != "0";
    if (!f["sparse-prefill-config"].empty())
      mm.head_patterns = std::make_shared<const vlm::SparseHeadPatterns>(vlm::load_sparse_patterns(f["sparse-prefill-config"]));
    const int32_t known[] = {frame};
    const int64_t V = host->config().vocab_size;
    std::vector<int32_t> table(static_cast<size_t>(o.num_kv_blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    vlm::SamplingParams greedy;
    greedy.temperature = 0;
    vlm::Sequence sampler_seq(0, {0}, greedy);

    std::map<int64_t, std::vector<float>> dense_logits;  // per prompt length: the dense mode's last row
    // One prompt of L tokens, prefilled in chunks; returns the TTFT in seconds.
    auto ttft = [&](int64_t L, const std::string& mode, uint32_t seed) {
      std::mt19937 rng(seed);
      std::vector<int32_t> ids(static_cast<size_t>(L));
      std::vector<vlm::ModalityTag> tags(static_cast<size_t>(L));
      for (int64_t i = 0; i < L; ++i) {
        ids[i] = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
        if (i >= kPrefix) tags[i] = {vlm::Modality::Video, 0};
      }
      vlm::BlockCounts counts;
      vlm::GridLayoutStore store;
      const bool sparse = mode == "mminference" || mode == "mminference-once" || mode == "mminference-chunk" ||
                          mode == "mminference-nosplit" || mode == "xattention";
      vlm::SparsePrefillConfig cfg = mm;
      if (mode == "xattention") {
        cfg.method = vlm::SparsePrefillMethod::XAttention;
        cfg.xattention.threshold = std::stof(f["xattention-threshold"]);
      }
      cfg.grid_search_once = mode != "mminference-chunk";
      vlm::cuda::set_block_sparse_split(mode == "mminference-nosplit" ? -1 : 0);
      const auto t0 = Clock::now();
      for (int64_t start = 0; start < L; start += chunk) {
        const int64_t n = std::min(chunk, L - start);
        vlm::SequenceChunk c;
        c.token_ids = std::span<const int32_t>(ids.data() + start, static_cast<size_t>(n));
        c.start_pos = static_cast<int32_t>(start);
        c.block_table = std::span<const int32_t>(table.data(), static_cast<size_t>((start + n + B - 1) / B));
        c.logits = start + n == L ? vlm::LogitsFor::Last : vlm::LogitsFor::None;
        c.modalities = std::span<const vlm::ModalityTag>(tags.data() + start, static_cast<size_t>(n));
        vlm::ForwardBatch fb = vlm::make_forward_batch({&c, 1}, B);
        if (sparse && n > 1 && L >= mm.min_prompt_len) {
          fb.sparse_prefill = {cfg};
          fb.prompt_lens = {static_cast<int32_t>(L)};
          fb.prompt_modalities = {std::span<const vlm::ModalityTag>(tags)};
          fb.frame_strides = {std::span<const int32_t>(known)};
          fb.sparse_block_counts = {&counts};
          fb.grid_layouts = {&store};
        } else if (mode != "dense" && !sparse) {
          throw std::runtime_error("unknown mode " + mode +
                                   " (dense, mminference, mminference-chunk, mminference-nosplit, mminference-once, xattention)");
        }
        backend.forward(fb, vlm::EmbeddingOverride{});
      }
      std::vector<vlm::SampleResult> out;
      const vlm::SampleTask task{&sampler_seq, 0};
      backend.sample({&task, 1}, out);  // synchronizes: the token is on the host
      const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
      // The last row's logits against the dense mode's of the same prompt (when it ran first).
      std::vector<float> logits;
      backend.decoder().download_logits(logits);
      if (mode == "dense") {
        dense_logits[L] = logits;
      } else if (dense_logits.count(L) && dense_logits[L].size() == logits.size()) {
        double num = 0, den = 0;
        for (size_t i = 0; i < logits.size(); ++i) {
          const double d = static_cast<double>(logits[i]) - dense_logits[L][i];
          num += d * d;
          den += static_cast<double>(dense_logits[L][i]) * dense_logits[L][i];
        }
        std::printf("  last-row logits vs dense: relative L2 %.4f\n", std::sqrt(num / std::max(den, 1e-30)));
      }
      if (sparse)
        std::printf("  density %.4f (%.0f of %.0f key blocks)\n", counts.computed / std::max(counts.causal, 1.0),
                    counts.computed, counts.causal);
      return dt;
    };

    for (const std::string& mode : modes) ttft(warmup, mode, 99);  // warm-up
    std::printf("warm-up done\n");  // sum_step_profile.py starts counting here
    std::fflush(stdout);
    for (int64_t L : lengths) {
      std::map<std::string, double> t;
      for (const std::string& mode : modes) {
        if (mode == "dense" && L > dense_max) continue;
        t[mode] = ttft(L, mode, 1);
        std::printf("TTFT %ld tokens (chunks of %ld), %s: %.3f s (%.0f tokens/s)\n", static_cast<long>(L),
                    static_cast<long>(chunk), mode.c_str(), t[mode], static_cast<double>(L) / t[mode]);
        std::fflush(stdout);
      }
      for (const char* m : {"mminference", "mminference-once", "mminference-chunk", "mminference-nosplit", "xattention"})
        if (t.count("dense") && t.count(m))
          std::printf("TTFT %ld tokens: dense / %s = %.2fx\n", static_cast<long>(L), m, t["dense"] / t[m]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_sparse_ttft: %s\n", e.what());
    return 1;
  }
  return 0;
}
