// vlm-generate: generation from token ids through the continuous-batching engine, for debugging
// and benchmarks.
//   vlm-generate --model DIR (--prompt-ids 1,2,3 | --prompt-ids @FILE | --prompt "text" [--chat]) [...] [--parallel N]
//                [--max-tokens 16] [--top-logprobs 5 | --no-logprobs] [--chunk-size 512]
//                [--kv-cache-dtype auto|f32|bf16|f16|fp8] [--block-size 16] [--threads N] [--ignore-eos]
//                [--temperature 0] [--top-k K] [--top-p P] [--seed S] [--log-level warn]
//                [--dtype auto|bfloat16|float16|float32] [--device auto|cpu|cuda]  (tools/common/backend_flags.h)
// --parallel N runs N sequences at once: sequence i takes the (i mod P)-th of the P prompts given
// with --prompt-ids, and seed S + i when --seed is given (so equal prompts sample differently
// unless greedy). All are submitted before the first step.
// Output (stdout): a line per generated token ("token ID logprob LP  top: ID(LP) ...") and a line
// "generated: IDS" per sequence; with N > 1 both carry the prefix "[i] " and come as each
// sequence ends. A timing summary goes to stderr; "decode" counts the steps that ran no prefill.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "kernels/core/thread_pool.h"
#include "model/chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/common/backend_flags.h"
#include "tools/common/cli_flags.h"

namespace {

struct Options {
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> texts;  // --prompt: tokenized with the model's tokenizer
  bool chat = false;               // --chat: each --prompt is a user message of the chat template
  int parallel = 1;
  int max_tokens = 16;
  int top_logprobs = 5;
  bool logprobs = true;
  int chunk_size = 512;
  int block_size = 16;
  int threads = 0;
  bool ignore_eos = false;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  std::string log_level = "warn";
  std::map<std::string, std::string> backend;  // --device, --dtype, --gpu-memory-utilization
};

vlm::cli::FlagTable with_backend_flags(vlm::cli::FlagTable t) {
  vlm::cli::add_backend_flags(t);
  return t;
}

const vlm::cli::FlagParser kCli(
    "vlm-generate --model DIR --prompt-ids 1,2,3 | --prompt TEXT [--chat] [more prompts] [flags]",
    with_backend_flags({{"model", "DIR: a Hugging Face checkpoint directory (required)"},
     {"prompt-ids", "1,2,3 or @FILE: one prompt as token ids (repeatable)"},
     {"prompt", "TEXT: one prompt as text, tokenized with the model's tokenizer (repeatable)"},
     {"chat", "(switch) each --prompt is a user message rendered with the chat template"},
     {"parallel", "N: sequences at once, round-robin over the prompts (default 1)"},
     {"max-tokens", "N: tokens to generate per sequence (default 16)"},
     {"top-logprobs", "K: top logprobs per token (default 5)"},
     {"no-logprobs", "(switch) print no logprobs"},
     {"chunk-size", "N: prefill chunk (max batched tokens, default 512)"},
     {"block-size", "N: KV block size (default 16)"},
     {"threads", "N: compute threads (default: all cores)"},
     {"kv-dtype", "older alias of --kv-cache-dtype"},
     {"ignore-eos", "(switch) keep generating past EOS"},
     {"temperature", "T (default 0: greedy)"},
     {"top-k", "K (default 0: off; -1 also off)"},
     {"top-p", "P (default 1)"},
     {"seed", "S: sampling seed (sequence i takes S + i)"},
     {"log-level", "LEVEL (default warn)"}}));

[[noreturn]] void usage(const std::string& error) { kCli.fail(error); }

int parse_int(const std::string& flag, const std::string& value, int min) {
  const int64_t v = kCli.integer(flag, value, min);
  if (v > 1'000'000'000) usage("--" + flag + " needs an integer <= 1000000000, got '" + value + "'");
  return static_cast<int>(v);
}
float parse_float(const std::string& flag, const std::string& value) {
  const double inf = std::numeric_limits<double>::infinity();
  return static_cast<float>(kCli.number(flag, value, -inf, inf));
}

// --prompt-ids: "1,2,3", or "@FILE" with the ids in a file (long prompts exceed argv limits).
std::vector<int32_t> parse_ids(std::string s) {
  if (!s.empty() && s[0] == '@') {
    std::ifstream in(s.substr(1));
    if (!in) usage("--prompt-ids: cannot read " + s.substr(1));
    s.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    for (char& c : s) if (c == '\n' || c == '\r' || c == ' ' || c == '\t') c = ',';
    while (!s.empty() && s.back() == ',') s.pop_back();
  }
  std::vector<int32_t> prompt;
  std::string item;
  for (size_t p = 0; p <= s.size(); ++p) {
    if (p == s.size() || s[p] == ',') {
      prompt.push_back(parse_int("prompt-ids", item, 0));
      item.clear();
    } else {
      item += s[p];
    }
  }
  return prompt;
}

Options parse(int argc, char** argv) {
  Options o;
  for (const auto& [a, v] : kCli.parse_list(argc, argv, {"chat", "no-logprobs", "ignore-eos"})) {
    if (a == "model") o.model = v;
    else if (a == "prompt-ids") o.prompts.push_back(parse_ids(v));
    else if (a == "prompt") o.texts.push_back(v);
    else if (a == "chat") o.chat = true;
    else if (a == "parallel") o.parallel = parse_int(a, v, 1);
    else if (a == "max-tokens") o.max_tokens = parse_int(a, v, 1);
    else if (a == "top-logprobs") o.top_logprobs = parse_int(a, v, 0);
    else if (a == "no-logprobs") o.logprobs = false;
    else if (a == "chunk-size") o.chunk_size = parse_int(a, v, 1);
    else if (a == "block-size") o.block_size = parse_int(a, v, 1);
    else if (a == "threads") o.threads = parse_int(a, v, 1);
    else if (a == "device" || a == "dtype" || a == "gpu-memory-utilization" || a == "gemm-activations" ||
             a == "enforce-eager" || a == "kv-cache-dtype" || a == "kv-dtype" || a == "load-format" ||
             a == "quantization" || a == "tensor-parallel-size" || a == "mm-encoder-devices") {
      const std::string key = a == "kv-dtype" ? "kv-cache-dtype" : a;
      if (o.backend.count(key)) usage("give --kv-cache-dtype once (--kv-dtype is its older alias)");
      o.backend[key] = v;
    } else if (a == "ignore-eos") o.ignore_eos = true;
    else if (a == "temperature") o.temperature = parse_float(a, v);
    else if (a == "top-k") o.top_k = parse_int(a, v, -1);
    else if (a == "top-p") o.top_p = parse_float(a, v);
    else if (a == "seed") o.seed = static_cast<uint64_t>(kCli.integer(a, v, 0));
    else if (a == "log-level") o.log_level = v;
  }
  {  // bad backend flag values are usage errors before anything loads
    vlm::EngineConfig scratch;
    vlm::cli::apply_backend_flags(o.backend, kCli, scratch);
  }
  if (o.model.empty()) usage("--model is required");
  if (o.prompts.empty() && o.texts.empty()) usage("--prompt-ids or --prompt is required");
  if (o.chat && o.texts.empty()) usage("--chat applies to --prompt texts");
  return o;
}

struct Output {
  std::string prefix;
  std::string lines;  // buffered token lines (N > 1: printed when the sequence ends)
  std::vector<int32_t> generated;
};

void print_token(const Options& o, Output& out, const vlm::RequestEvent& ev, size_t i, bool buffer) {
  std::string line = fmt::format("{}token {}", out.prefix, ev.token_ids[i]);
  if (i < ev.logprobs.size()) {
    const vlm::TokenLogprobs& lp = ev.logprobs[i];
    line += fmt::format(" logprob {:.6f}", lp.logprob);
    if (!lp.top.empty()) {
      line += "  top:";
      for (const vlm::TopLogprob& t : lp.top) line += fmt::format(" {}({:.4f})", t.token_id, t.logprob);
    }
  }
  line += "\n";
  if (buffer) out.lines += line;
  else std::fputs(line.c_str(), stdout);
}

// Tokenizes the --prompt texts (through the chat template with --chat) and appends them to the
// id prompts.
std::shared_ptr<const vlm::Tokenizer> tokenize_texts(Options& o) {
  if (o.texts.empty()) return nullptr;
  std::shared_ptr<const vlm::Tokenizer> tok = vlm::Tokenizer::load(o.model);
  std::optional<vlm::ChatTemplate> tmpl;
  if (o.chat) {
    tmpl = vlm::ChatTemplate::load(o.model);
    if (!tmpl) usage(o.model + " has no chat template (drop --chat)");
  }
  for (const auto& text : o.texts) {
    if (!tmpl) {
      o.prompts.push_back(tok->encode(text, true));
      continue;
    }
    nlohmann::ordered_json messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    vlm::ChatTemplate::add_tokenizer_defaults(context, *tok, true);
    o.prompts.push_back(tok->encode_chat(tmpl->render(messages, context)));
  }
  return tok;
}

int run(Options o) {
  vlm::set_log_level(o.log_level);
  if (o.threads > 0) vlm::set_num_threads(o.threads);
  const std::shared_ptr<const vlm::Tokenizer> tok = tokenize_texts(o);
  vlm::EngineConfig device_only;  // --device, for where dummy weights go (streamed to the GPU)
  vlm::cli::apply_backend_flags(o.backend, kCli, device_only);
  auto decoder = vlm::LlmDecoder::load(o.model, vlm::cli::load_options(o.backend, kCli, device_only));
  const vlm::ModelConfig& c = decoder->config();
  size_t longest = 0;
  for (const auto& p : o.prompts) {
    longest = std::max(longest, p.size());
    for (int32_t id : p)
      if (id >= c.vocab_size) usage("prompt id " + std::to_string(id) + " >= vocab size " + std::to_string(c.vocab_size));
  }

  // A KV cache that holds every sequence at full length: no preemption in a benchmark.
  vlm::EngineConfig ec;
  vlm::cli::apply_backend_flags(o.backend, kCli, ec);
  ec.block_size = o.block_size;
  ec.max_model_len = static_cast<int64_t>(longest) + o.max_tokens;
  int64_t blocks = 0;
  for (int i = 0; i < o.parallel; ++i)
    blocks += (static_cast<int64_t>(o.prompts[i % o.prompts.size()].size()) + o.max_tokens + o.block_size - 1) /
              o.block_size;
  ec.num_kv_blocks = std::max(blocks, (ec.max_model_len + o.block_size - 1) / o.block_size) + o.parallel;
  ec.scheduler.max_num_seqs = o.parallel;
  ec.scheduler.max_waiting = o.parallel;
  ec.scheduler.prefill_chunk_size = o.chunk_size;
  ec.scheduler.max_num_batched_tokens = o.chunk_size + o.parallel;
  vlm::Engine engine(ec, std::move(decoder));

  std::vector<std::shared_ptr<vlm::RequestChannel>> channels;
  std::vector<Output> outputs(static_cast<size_t>(o.parallel));
  int64_t prompt_tokens = 0;
  for (int i = 0; i < o.parallel; ++i) {
    vlm::GenerationRequest r;
    r.id = std::to_string(i);
    r.prompt_ids = o.prompts[i % o.prompts.size()];
    prompt_tokens += static_cast<int64_t>(r.prompt_ids.size());
    r.params.max_tokens = o.max_tokens;
    r.params.ignore_eos = o.ignore_eos;
    r.params.temperature = o.temperature;
    r.params.top_k = o.top_k;
    r.params.top_p = o.top_p;
    if (o.seed) r.params.seed = *o.seed + static_cast<uint64_t>(i);
    if (o.logprobs) r.params.logprobs = o.top_logprobs;
    channels.push_back(std::make_shared<vlm::RequestChannel>());
    if (o.parallel > 1) outputs[i].prefix = fmt::format("[{}] ", i);
    engine.add_request(std::move(r), channels.back());
  }

  double prefill_s = 0, decode_s = 0;
  int64_t decode_tokens = 0, decode_steps = 0;
  while (engine.has_unfinished()) {
    engine.step();
    const vlm::EngineStats& s = engine.stats();
    if (s.last_step_num_prefill_seqs == 0) {
      decode_s += s.last_step.total_s();
      decode_tokens += s.last_step_num_decode_seqs;
      ++decode_steps;
    } else {
      prefill_s += s.last_step.total_s();
    }
    for (int i = 0; i < o.parallel; ++i) {
      Output& out = outputs[i];
      while (auto ev = channels[i]->try_pop()) {
        if (ev->error) throw vlm::RequestError(ev->error->status, ev->error->type, ev->error->message);
        for (size_t k = 0; k < ev->token_ids.size(); ++k) {
          print_token(o, out, *ev, k, o.parallel > 1);
          out.generated.push_back(ev->token_ids[k]);
        }
        if (ev->finish_reason == vlm::FinishReason::None) continue;
        std::fputs(fmt::format("{}{}generated: {}\n", out.lines, out.prefix, fmt::join(out.generated, ",")).c_str(),
                   stdout);
        if (tok) std::fputs(fmt::format("{}text: {}\n", out.prefix, nlohmann::json(tok->decode(out.generated, true)).dump(
                                                                   -1, ' ', false, nlohmann::json::error_handler_t::replace)).c_str(),
                            stdout);
        out.lines.clear();
      }
    }
  }
  std::fflush(stdout);
  const vlm::EngineStats& s = engine.stats();
  std::fprintf(stderr,
               "%d sequence(s), %lld prompt tokens, %lld generated tokens, %lld steps (%.3f s)\n"
               "prefill steps: %.3f s\n"
               "decode steps (no prefill): %lld tokens in %.3f s over %lld steps = %.2f tokens/s\n",
               o.parallel, static_cast<long long>(prompt_tokens), static_cast<long long>(s.num_generation_tokens),
               static_cast<long long>(s.num_steps), s.total_time.total_s(), prefill_s,
               static_cast<long long>(decode_tokens), decode_s, static_cast<long long>(decode_steps),
               decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0.0);
  std::fprintf(stderr, "stage totals: schedule %.4f s, run %.3f s, sample %.4f s, postprocess %.4f s\n",
               s.total_time.schedule_s, s.total_time.run_s, s.total_time.sample_s, s.total_time.postprocess_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  return vlm::cli::run_tool([&] { return run(o); });
}
