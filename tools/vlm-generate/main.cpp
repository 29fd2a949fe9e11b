// vlm-generate: one-shot greedy generation from token ids, for debugging the decoder.
//   vlm-generate --model DIR --prompt-ids 1,2,3 [--max-tokens 16] [--top-logprobs 5]
//                [--chunk-size 512] [--kv-dtype f32|bf16|f16] [--block-size 16]
//                [--threads N] [--ignore-eos] [--log-level info]
// Prints one line per generated token (id, logprob, the top alternatives) and a summary line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "engine/kv_cache.h"
#include "kernels/check.h"
#include "kernels/log.h"
#include "kernels/thread_pool.h"
#include "model/llm_decoder.h"

namespace {

struct Options {
  std::string model;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  int top_logprobs = 5;
  int chunk_size = 512;
  int block_size = 16;
  int threads = 0;
  vlm::DType kv_dtype = vlm::DType::F32;
  bool ignore_eos = false;
  std::string log_level = "warn";
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr,
               "error: %s\nusage: vlm-generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] "
               "[--top-logprobs K] [--chunk-size N] [--kv-dtype f32|bf16|f16] [--block-size N] "
               "[--threads N] [--ignore-eos] [--log-level LEVEL]\n",
               error.c_str());
  std::exit(2);
}

int parse_int(const std::string& flag, const std::string& value, int min) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < min || v > 1'000'000'000)
    usage(flag + " needs an integer >= " + std::to_string(min) + ", got '" + value + "'");
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--prompt-ids") {
      std::string s = value(), item;
      for (size_t p = 0; p <= s.size(); ++p) {
        if (p == s.size() || s[p] == ',') {
          o.prompt.push_back(parse_int("--prompt-ids", item, 0));
          item.clear();
        } else {
          item += s[p];
        }
      }
    } else if (a == "--max-tokens") o.max_tokens = parse_int(a, value(), 1);
    else if (a == "--top-logprobs") o.top_logprobs = parse_int(a, value(), 0);
    else if (a == "--chunk-size") o.chunk_size = parse_int(a, value(), 1);
    else if (a == "--block-size") o.block_size = parse_int(a, value(), 1);
    else if (a == "--threads") o.threads = parse_int(a, value(), 1);
    else if (a == "--kv-dtype") {
      std::string v = value();
      if (!vlm::parse_float_dtype_name(v, &o.kv_dtype)) usage("--kv-dtype must be f32, bf16 or f16");
    } else if (a == "--ignore-eos") o.ignore_eos = true;
    else if (a == "--log-level") o.log_level = value();
    else if (a == "--help" || a == "-h") usage("help requested");
    else usage("unknown argument '" + a + "'");
  }
  if (o.model.empty()) usage("--model is required");
  if (o.prompt.empty()) usage("--prompt-ids is required");
  return o;
}

// log_softmax of one row, in double for the normalizer.
std::vector<float> log_softmax(const float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - m));
  const double lse = m + std::log(sum);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] - lse);
  return out;
}

int run(const Options& o) {
  vlm::set_log_level(o.log_level);
  if (o.threads > 0) vlm::set_num_threads(o.threads);
  auto decoder = vlm::LlmDecoder::load(o.model);
  const vlm::ModelConfig& c = decoder->config();
  for (int32_t id : o.prompt)
    if (id >= c.vocab_size) usage("prompt id " + std::to_string(id) + " >= vocab size " + std::to_string(c.vocab_size));

  // One sequence, blocks 0..n-1 in order.
  const int64_t total = static_cast<int64_t>(o.prompt.size()) + o.max_tokens;
  vlm::KVCacheShape shape{c.num_layers, (total + o.block_size - 1) / o.block_size, o.block_size,
                          static_cast<int>(c.num_kv_heads), static_cast<int>(c.head_dim), o.kv_dtype};
  vlm::KVCache cache(shape);
  std::vector<int32_t> blocks(static_cast<size_t>(shape.num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);

  std::vector<int32_t> tokens = o.prompt, generated;
  int32_t cached = 0;
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  double prefill_s = 0;
  while (true) {
    // Feed what is not cached yet (prompt chunks, then one token per step).
    const auto remaining = static_cast<int32_t>(tokens.size()) - cached;
    const int32_t n = std::min(remaining, o.chunk_size);
    vlm::SequenceChunk chunk{std::span<const int32_t>(tokens.data() + cached, n), cached, blocks,
                             vlm::LogitsFor::Last};
    vlm::ForwardBatch fb = vlm::make_forward_batch({&chunk, 1}, o.block_size);
    decoder->forward(fb, cache.layers(), logits);
    cached += n;
    if (cached < static_cast<int32_t>(tokens.size())) continue;  // more prompt chunks
    if (generated.empty())
      prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::vector<float> lp = log_softmax(logits.data(), c.vocab_size);
    std::vector<int32_t> order(static_cast<size_t>(c.vocab_size));
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min<int>(std::max(o.top_logprobs, 1), static_cast<int>(c.vocab_size));
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
    const int32_t next = order[0];
    std::printf("token %d logprob %.6f", next, lp[next]);
    if (o.top_logprobs > 0) {
      std::printf("  top:");
      for (int i = 0; i < std::min(k, o.top_logprobs); ++i) std::printf(" %d(%.4f)", order[i], lp[order[i]]);
    }
    std::printf("\n");
    generated.push_back(next);
    tokens.push_back(next);
    const bool eos = std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end();
    if (static_cast<int>(generated.size()) >= o.max_tokens || (eos && !o.ignore_eos)) break;
  }
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string ids;
  for (size_t i = 0; i < generated.size(); ++i) ids += (i ? "," : "") + std::to_string(generated[i]);
  std::printf("generated: %s\n", ids.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "prompt %zu tokens in %.3f s; %zu tokens generated in %.3f s\n", o.prompt.size(),
               prefill_s, generated.size(), total_s - prefill_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const vlm::LoadError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 3;
  }
}
