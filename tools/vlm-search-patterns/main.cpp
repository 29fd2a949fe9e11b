// vlm-search-patterns: the offline per-head sparse-pattern search (MMInference's Algorithm 4,
// ALGORITHMS.md §4.5): runs the model's prefill on one calibration prompt, and per layer and
// query head measures every candidate pattern's attention-output error against dense attention
// and its kept-block density, then picks the cheapest candidate (lowest density) whose error is
// at most --target-error (dense when none is: exactness first). Writes the per-head file of
// model/methods/sparse_patterns_file.h, which vlm-server reads with --sparse-prefill-config.
//
// DIR: a text checkpoint or a vision-language one (its language model: tools/common/language_model.h;
// Qwen3-VL included), the calibration prompt as token ids.
//   vlm-search-patterns --model DIR --out FILE [--calibration IDS_FILE | --length N] [--seed S]
//                       [--video START:LEN]... [--target-error E] [--block B] [--threads N]
//                       [--candidates NAME,...] [--device cpu|cuda|auto] [--chunk N]
//                       [--gpu-memory-utilization F]
//
// IDS_FILE: whitespace-separated token ids. Without it, N random ids (default 2048).
// --video marks positions [START, START+LEN) as video tokens (modality tags only: the boundary
// candidates are searched when the prompt mixes modalities). Candidates (sizes scaled to the
// prompt length N from the paper's Table 3, whose calibration prompt had ~25K tokens):
// dense; A-shape (128, N/16 | N/8 | N/4); vertical-slash (1000, 1024 | 2048 | 4096) * N/25000;
// grid (stride search; lines s, vs, hvs); XAttention (S 8, tau 0.9); Q- and 2D-boundary
// vertical-slash (1000, 2048) * N/25000 with mixed modalities. Error: ||o - o_dense|| / ||o_dense||
// over the head's rows (the attention output, as the paper's search). The candidates, figures and
// selection rule: model/methods/sparse_pattern_search.h.
// --device cuda (tools/common/backend_flags; default cpu, auto = cuda where a GPU is visible):
// the search on the GPU (model/decoder/cuda/cuda_pattern_search.h): bf16 prefill in chunks of
// --chunk tokens (default 8192), the figures measured on the last chunk's rows against all keys;
// 64-token blocks, heads 64/128 wide. The per-layer wall time and the chosen counts go to stdout.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backends/make_step_backend.h"
#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "model/decoder/llm_decoder.h"
#include "model/methods/sparse_pattern_search.h"
#include "model/methods/sparse_patterns_file.h"
#include "tools/common/backend_flags.h"
#include "tools/common/cli_flags.h"
#include "tools/common/language_model.h"
#if VLM_HAVE_CUDA
#include "model/decoder/cuda/cuda_pattern_search.h"
#endif

namespace {

vlm::cli::FlagTable flag_table() {
  vlm::cli::FlagTable t = {
      {"model", "DIR: a Hugging Face checkpoint directory (required)"},
      {"out", "FILE: the per-head pattern file to write (required)"},
      {"calibration", "IDS_FILE: whitespace-separated token ids of the calibration prompt"},
      {"length", "N: without --calibration, N random ids (default 2048)"},
      {"seed", "S: seed of the random ids (default 1)"},
      {"video", "START:LEN: positions tagged as video tokens (repeatable)"},
      {"target-error", "E: the largest attention-output error a pattern may have (default 0.05)"},
      {"block", "B: block size of the sparse plans (default 64; the GPU takes 64 only)"},
      {"threads", "N: compute threads (default: all cores)"},
      {"candidates", "NAME,...: search only these candidates (dense is always kept; names as printed)"},
      {"chunk", "N: --device cuda: prefill chunk in tokens; the last chunk's rows are measured (default 8192)"}};
  vlm::cli::add_backend_flags(t);
  t["device"] = "cpu (default), cuda, or auto (cuda when built with CUDA and a GPU is visible)";
  return t;
}

const vlm::cli::FlagParser kCli(
    "vlm-search-patterns --model DIR --out FILE [--calibration IDS_FILE | --length N] [flags]", flag_table());

[[noreturn]] void usage(const std::string& e) { kCli.fail(e); }

std::string count_key(const vlm::HeadPattern& p) {
  return vlm::head_pattern_type_name(p.type) +
         std::string(p.boundary == vlm::BoundaryKind::None ? "" : p.boundary == vlm::BoundaryKind::Q ? "+q" : "+2d");
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
  vlm::EngineConfig backend;
  backend.device = vlm::Device::Cpu;  // the search's default
  vlm::cli::apply_backend_flags(flags, fp, backend);
  try {
    std::string why;
    if (backend.device == vlm::Device::Auto) backend.device = vlm::cuda_available(&why) ? vlm::Device::Cuda : vlm::Device::Cpu;
    else if (backend.device == vlm::Device::Cuda && !vlm::cuda_available(&why))
      throw vlm::LoadError("--device cuda: " + why);
    const bool gpu = backend.device == vlm::Device::Cuda;
    if (gpu && backend.dtype && *backend.dtype != vlm::DType::BF16)
      usage("--device cuda searches in bfloat16 (the GPU's sparse kernel), not --dtype " +
            std::string(vlm::dtype_name(*backend.dtype)));
    if (flags.count("threads")) vlm::set_num_threads(static_cast<int>(fp.integer("threads", flags["threads"], 1)));
    const vlm::cli::LanguageModel lm = vlm::cli::load_language_model(flags["model"]);  // text or VLM checkpoint
    const vlm::LlmDecoder* decoder = &lm.decoder();
    const auto& cfg = decoder->config();
    const int L = static_cast<int>(cfg.num_layers), H = static_cast<int>(cfg.num_heads);
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
    const vlm::PatternSearchPrompt prompt = vlm::make_search_prompt(std::move(ids), videos);
    const double target = flags.count("target-error") ? fp.number("target-error", flags["target-error"], 0, 1e9) : 0.05;
    const int block = flags.count("block") ? static_cast<int>(fp.integer("block", flags["block"], 1)) : 64;
    std::vector<vlm::PatternCandidate> cands = vlm::pattern_candidates(N, prompt.mixed());
    if (flags.count("candidates")) {
      try {
        cands = vlm::select_candidates(cands, flags["candidates"]);
      } catch (const std::invalid_argument& e) {
        usage(std::string("--candidates: ") + e.what());
      }
    }

    auto progress = [&](int layer) {
      std::fprintf(stderr, "\rlayer %d/%d [", layer + 1, L);
      for (int i = 0; i < L; ++i) std::fputc(i <= layer ? '#' : '.', stderr);
      std::fprintf(stderr, "]");
      std::fflush(stderr);
    };
    vlm::PatternSearchTable table;
    if (gpu) {
#if VLM_HAVE_CUDA
      vlm::CudaPatternSearchOptions o;
      o.block = block;
      if (flags.count("chunk")) o.chunk = fp.integer("chunk", flags["chunk"], 64);
      o.gpu_memory_utilization = backend.gpu_memory_utilization;
      table = vlm::search_patterns_cuda(*decoder, prompt, cands, o, progress);
#endif
    } else {
      table = vlm::search_patterns_cpu(*decoder, prompt, cands, block, progress);
    }
    std::fprintf(stderr, "\n");
    const vlm::PatternChoice choice = vlm::choose_patterns(table, cands, target);
    std::map<std::string, int> counts;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) ++counts[count_key(choice.patterns.layers[l][h])];
    std::ofstream out(flags["out"]);
    if (!out) throw vlm::LoadError(flags["out"] + ": cannot write");
    out << vlm::sparse_patterns_to_json(choice.patterns, cfg.architecture, choice.errors) << "\n";
    if (!out) throw vlm::LoadError(flags["out"] + ": write failed");
    std::printf("wrote %s: %d layers x %d heads, %d calibration tokens, target error %.3g, device %s\n",
                flags["out"].c_str(), L, H, N, target, gpu ? "cuda" : "cpu");
    for (const auto& [k, n] : counts) std::printf("  %s: %d heads\n", k.c_str(), n);
    double total = 0;
    for (double s : table.layer_seconds) total += s;
    std::printf("measured rows %d of %d; %zu candidates; search %.3f s over %d layers (%.3f s per layer)\n",
                table.probe_rows, table.num_keys, cands.size(), total, L, total / std::max(L, 1));
    std::printf("per layer (s):");
    for (double s : table.layer_seconds) std::printf(" %.3f", s);
    std::printf("\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
