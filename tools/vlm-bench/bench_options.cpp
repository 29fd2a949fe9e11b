#include "tools/vlm-bench/bench_options.h"

#include <curl/curl.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

namespace vlm::bench {
namespace {

double parse_double(const std::string& flag, const std::string& value, double min) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < min)
    throw UsageError(flag + " needs a number >= " + std::to_string(min) + ", got '" + value + "'");
  return v;
}

int parse_int(const std::string& flag, const std::string& value, int min) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < min || v > 1'000'000'000)
    throw UsageError(flag + " needs an integer >= " + std::to_string(min) + ", got '" + value + "'");
  return static_cast<int>(v);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

// "ttft:500 tpot:50 e2el:2000" (also comma separated), values in milliseconds.
void parse_goodput(BenchOptions& o, const std::string& spec) {
  std::string s = spec;
  for (char& c : s) if (c == ',') c = ' ';
  std::stringstream ss(s);
  std::string item;
  bool any = false;
  while (ss >> item) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw UsageError("--goodput needs NAME:MS items, got '" + item + "'");
    const std::string name = item.substr(0, colon);
    const double ms = parse_double("--goodput " + name, item.substr(colon + 1), 0.0);
    if (name == "ttft") o.goodput_ttft_ms = ms;
    else if (name == "tpot") o.goodput_tpot_ms = ms;
    else if (name == "e2el") o.goodput_e2el_ms = ms;
    else throw UsageError("--goodput knows ttft, tpot and e2el, got '" + name + "'");
    any = true;
  }
  if (!any) throw UsageError("--goodput needs at least one of ttft:MS tpot:MS e2el:MS");
}

}  // namespace

std::string BenchOptions::url(const std::string& path) const {
  std::string base = base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  return base + path;
}

std::string BenchOptions::api_path() const {
  return endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
}

std::string bench_usage() {
  return R"(usage: vlm-bench [options]
Target:
  --base-url URL            server (default http://127.0.0.1:8000); loopback only unless
  --allow-remote            is given
  --endpoint chat|completions
  --model NAME              default: the first id of GET /v1/models
  --api-key KEY             default: $OPENAI_API_KEY
  --no-stream               non-streaming requests (TTFT = E2EL)
Workload:
  --dataset random|random-mm|jsonl|multi-turn   --dataset-path FILE (jsonl)
  --num-turns N (3)  --turn-len N (64)   multi-turn: --num-prompts conversations, each resending
                            its history (the server's own answers) plus a new user turn of
                            --turn-len tokens; turn 1 has --input-len tokens and
                            --images-per-request images; turns are sent in waves
  --num-prompts N (1000)    --warmup N (0)     --seed N (0)
  --input-len N (1024)      --output-len N (128)   --range-ratio R (0)
  --prompt-ids              completions: send prompts as token-id lists (needs a tokenizer)
  --tokenizer DIR           size prompts with this Hugging Face tokenizer directory
                            (tokenizer.json); default: the server's /tokenize (vLLM's or
                            llama.cpp's shape), else an estimate of one token per word
  --ignore-eos | --no-ignore-eos   ask for exactly --output-len tokens (default) or stop at EOS
  --images-per-request N (1)  --image-size WxH|N (512x512)  --video-frames N (0)
  --video-part              send the --video-frames frames as one video_url part holding the
                            list of frame URLs (one video to a Qwen2-VL server), not as images
  --image-file PATH         repeatable: send these files' bytes (round robin over requests'
                            images) instead of generated --image-size PNGs
Arrivals:
  --request-rate inf|R      requests/s, Poisson (default inf: all at t=0)
  --burstiness B            gamma-distributed gaps (1 = Poisson)
  --max-concurrency N       at most N requests in flight
Limits:
  --timeout S (600)         the whole run stops after S seconds
  --request-timeout S (300) one request
Output:
  --percentiles 50,90,99    --goodput ttft:MS tpot:MS e2el:MS
  --result-json FILE        --plot FILE.svg    --progress | --no-progress
)";
}

BenchOptions parse_bench_options(int argc, const char* const* argv) {
  BenchOptions o;
  if (const char* key = std::getenv("OPENAI_API_KEY")) o.api_key = key;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--base-url") o.base_url = value();
    else if (a == "--endpoint") {
      o.endpoint = value();
      if (o.endpoint == "/v1/chat/completions") o.endpoint = "chat";
      if (o.endpoint == "/v1/completions") o.endpoint = "completions";
      if (o.endpoint != "chat" && o.endpoint != "completions")
        throw UsageError("--endpoint is chat or completions, got '" + o.endpoint + "'");
    } else if (a == "--model") o.model = value();
    else if (a == "--api-key") o.api_key = value();
    else if (a == "--allow-remote") o.allow_remote = true;
    else if (a == "--no-stream") o.stream = false;
    else if (a == "--dataset") {
      o.dataset = value();
      if (o.dataset != "random" && o.dataset != "random-mm" && o.dataset != "jsonl" && o.dataset != "multi-turn")
        throw UsageError("--dataset is random, random-mm, jsonl or multi-turn, got '" + o.dataset + "'");
    } else if (a == "--dataset-path") o.dataset_path = value();
    else if (a == "--num-prompts") o.num_prompts = parse_int(a, value(), 1);
    else if (a == "--warmup") o.warmup = parse_int(a, value(), 0);
    else if (a == "--input-len") o.input_len = parse_int(a, value(), 1);
    else if (a == "--num-turns") o.num_turns = parse_int(a, value(), 1);
    else if (a == "--turn-len") o.turn_len = parse_int(a, value(), 1);
    else if (a == "--output-len") o.output_len = parse_int(a, value(), 1);
    else if (a == "--range-ratio") {
      o.range_ratio = parse_double(a, value(), 0.0);
      if (o.range_ratio >= 1.0) throw UsageError("--range-ratio must be < 1");
    } else if (a == "--prompt-ids") o.prompt_ids = true;
    else if (a == "--ignore-eos") o.ignore_eos = true;
    else if (a == "--no-ignore-eos") o.ignore_eos = false;
    else if (a == "--tokenizer") o.tokenizer_dir = value();
    else if (a == "--images-per-request") o.images_per_request = parse_int(a, value(), 0);
    else if (a == "--image-size") {
      const std::string v = value();
      const auto x = v.find('x');
      if (x == std::string::npos) {
        o.image_width = o.image_height = parse_int(a, v, 1);
      } else {
        o.image_width = parse_int(a, v.substr(0, x), 1);
        o.image_height = parse_int(a, v.substr(x + 1), 1);
      }
      if (o.image_width > 8192 || o.image_height > 8192) throw UsageError("--image-size is at most 8192x8192");
    } else if (a == "--image-file") o.image_files.push_back(value());
    else if (a == "--video-frames") o.video_frames = parse_int(a, value(), 0);
    else if (a == "--video-part") o.video_part = true;
    else if (a == "--seed") o.seed = static_cast<unsigned long long>(parse_double(a, value(), 0.0));
    else if (a == "--request-rate") {
      const std::string v = value();
      o.request_rate = (v == "inf") ? 0.0 : parse_double(a, v, 1e-9);
    } else if (a == "--burstiness") {
      o.burstiness = parse_double(a, value(), 1e-6);
    } else if (a == "--max-concurrency") o.max_concurrency = parse_int(a, value(), 1);
    else if (a == "--timeout") o.timeout_s = parse_double(a, value(), 0.001);
    else if (a == "--request-timeout") o.request_timeout_s = parse_double(a, value(), 0.001);
    else if (a == "--percentiles" || a == "--metric-percentiles") {
      o.percentiles.clear();
      for (const std::string& p : split(value(), ',')) {
        const double v = parse_double(a, p, 0.0);
        if (v > 100.0) throw UsageError(a + " values are in [0, 100], got '" + p + "'");
        o.percentiles.push_back(v);
      }
      if (o.percentiles.empty()) throw UsageError(a + " needs at least one value");
    } else if (a == "--goodput") {
      // Take every following word that looks like NAME:MS (vLLM's form is space separated).
      std::string spec = value();
      while (i + 1 < argc && std::string(argv[i + 1]).find(':') != std::string::npos &&
             std::string(argv[i + 1]).rfind("--", 0) != 0)
        spec += " " + std::string(argv[++i]);
      parse_goodput(o, spec);
    } else if (a == "--result-json") o.result_json = value();
    else if (a == "--plot") o.plot_svg = value();
    else if (a == "--progress") o.progress = true;
    else if (a == "--no-progress") o.no_progress = true;
    else throw UsageError("unknown option '" + a + "'");
  }
  if (o.dataset == "jsonl" && o.dataset_path.empty()) throw UsageError("--dataset jsonl needs --dataset-path FILE");
  if ((o.dataset == "random-mm" || o.dataset == "multi-turn") && o.endpoint != "chat")
    throw UsageError("--dataset " + o.dataset + " needs --endpoint chat (images and turns go in chat messages)");
  if (o.prompt_ids && o.endpoint != "completions") throw UsageError("--prompt-ids needs --endpoint completions");
  if (!o.allow_remote && !is_loopback_url(o.base_url))
    throw UsageError("--base-url " + o.base_url + " is not a loopback address; pass --allow-remote to load a remote server");
  return o;
}

bool is_loopback_url(const std::string& base_url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), curl_url_cleanup);
  if (curl_url_set(u.get(), CURLUPART_URL, base_url.c_str(), 0) != CURLUE_OK)
    throw UsageError("--base-url '" + base_url + "' is not a valid URL");
  char* scheme = nullptr;
  char* host = nullptr;
  curl_url_get(u.get(), CURLUPART_SCHEME, &scheme, 0);
  curl_url_get(u.get(), CURLUPART_HOST, &host, 0);
  const std::string s = scheme ? scheme : "", h = host ? host : "";
  curl_free(scheme);
  curl_free(host);
  if (s != "http" && s != "https") throw UsageError("--base-url must be http or https, got '" + base_url + "'");
  if (h == "localhost" || h == "[::1]" || h == "::1") return true;
  // 127.0.0.0/8, written as a dotted quad.
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(h.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4)
    return a == 127 && b < 256 && c < 256 && d < 256;
  return false;
}

}  // namespace vlm::bench
