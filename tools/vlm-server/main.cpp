// vlm-server: the OpenAI-compatible HTTP server.
//   vlm-server --model DIR [--served-model-name NAME] [--host 127.0.0.1] [--port 8000]
//              [--api-key KEY] [--config FILE.json] [--max-num-seqs N] [--max-num-batched-tokens N]
//              [--long-prefill-token-threshold N] [--prefill-only-batched-tokens auto|0|N]
//              [--max-model-len N] [--block-size N] [--kv-cache-memory-gib G] [--num-kv-blocks N]
//              [--kv-cache-dtype auto|f32|bf16|f16|fp8] [--sink-router off|on] [--sink-router-config FILE]
//              [--max-waiting N] [--threads N] [--log-level L] [--[no-]enable-prefix-caching]
//              [--dtype auto|bfloat16|float16|float32] [--device auto|cpu|cuda]
//              [--allowed-media-domains a,b] [--allowed-local-media-path DIR] [--drain-timeout S]
//              [--max-images-per-request N] [--max-image-bytes N] [--max-image-pixels N]
//              [--mm-processor-cache-gb G] [--media-workers N] [--media-queue N]
//              [--max-videos-per-request N] [--max-video-frames N] [--max-video-bytes N]
//              [--max-video-seconds S] [--max-video-file-frames N] [--video-decode-timeout-ms MS]
//              [--video-total-pixels N] [--gpu-media-preprocess 0|1]
//              [--look-m MODE|off] [--look-m-recent-ratio R] [--look-m-important-ratio R]
//              [--look-m-scores window|full] [--look-m-text-only 0|1]
//              [--max-body-bytes N] [--max-header-bytes N] [--read-timeout-ms MS] [--idle-timeout-ms MS]
//              [--write-timeout-ms MS] [--max-requests-per-connection N] [--media-connect-timeout-ms MS]
//              [--media-timeout-ms MS] [--max-media-redirects N]   (docs/RELIABILITY.md lists every limit)
//              [--sparse-prefill METHOD] [--sparse-prefill-config FILE] [--sparse-prefill-min-len N]
//              [--sparse-prefill-grid-search chunk|prompt] [--chat-template-content-format auto|string|openai]
//              [--no-webui]
// The model class comes from DIR/config.json's architectures: LlamaForCausalLM and
// Qwen2ForCausalLM (text), LlavaForConditionalGeneration (images in chat messages; needs
// DIR/preprocessor_config.json), Qwen2VLForConditionalGeneration and
// Qwen2_5_VLForConditionalGeneration (images and videos as frame lists; DIR/preprocessor_config.json
// and DIR/video_preprocessor_config.json, else the image one), LlavaOnevisionForConditionalGeneration
// (images and videos; the processor files in either layout: preprocessor_config.json and
// video_preprocessor_config.json, or transformers 5's processor_config.json).
// A --config file is a JSON object with the same names (dashes or underscores); flags override it.
// Every flag can also come from the environment as VLM_SERVER_<NAME> (upper case, '-' -> '_'), e.g.
// VLM_SERVER_MODEL=/model, VLM_SERVER_DRAIN_TIMEOUT=60 (for containers): flags > environment > --config.
// --listen-while-loading off: the port opens only once the model is loaded (connection refused until
// then), for load balancers that only check passively (nginx max_fails): they then retry elsewhere
// instead of handing requests to a replica that is still loading. Default on: every route answers
// 503 "model is loading" with Retry-After.
// --chat-template-content-format auto|string|openai: message content as one string (text parts
// joined) or as the list of parts; auto reads it off the template (server/chat_messages.h).
// GET / serves the web playground (server/webui) unless --no-webui (a bare flag, or 1/0, true/false).
// SIGINT/SIGTERM: stop accepting, finish in-flight requests for up to --drain-timeout seconds, exit 0.
// Engine failure (a CUDA error in a step, EngineLoop::failed): live requests end with a 500, /health
// and new requests answer 503 for --failure-exit-delay seconds after the replies are out (so a
// health probe sees it), then exit 3 for an orchestrator to restart the server. --debug-fail-step N
// (tests only) makes the backend's forward N fail as a broken GPU would.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/make_step_backend.h"
#include "engine/engine_loop.h"
#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "kernels/core/thread_pool.h"
#include "model/families/architecture.h"
#include "model/families/llava_onevision.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "model/families/qwen3_vl.h"
#include "model/methods/sink_router_config_file.h"
#include "model/methods/sparse_patterns_file.h"
#include "server/api_server.h"
#include "tools/common/backend_flags.h"
#include "tools/common/cli_flags.h"
#include "server/http/http_server.h"
#include "server/webui/web_ui.h"

namespace {

using nlohmann::json;

const std::map<std::string, std::string> kFlags = {
    {"model", "checkpoint directory (required)"}, {"served-model-name", "model id for clients"},
    {"host", "bind address (default 127.0.0.1)"}, {"port", "port (default 8000)"},
    {"api-key", "require 'Authorization: Bearer KEY'"}, {"config", "JSON file of flags"},
    {"max-num-seqs", "running sequences (default 256)"}, {"max-num-batched-tokens", "tokens per step (default 2048)"},
    {"long-prefill-token-threshold",
     "while requests wait, a long prompt's chunk per step (default 3/4 of --max-num-batched-tokens; 0: off)"},
    {"prefill-only-batched-tokens",
     "tokens of a step that runs no decode, so a long prompt prefilled alone takes bigger chunks (default auto: "
     "8192 on the GPU, off on the CPU; 0: off; else at least --max-num-batched-tokens). A request arriving during "
     "such a step waits for it to end (at most one step); once any stream decodes, steps are back to "
     "--max-num-batched-tokens"},
    {"max-model-len", "longest sequence (default: the model's)"}, {"block-size", "KV block size (default 16)"},
    {"kv-cache-memory-gib", "KV cache size (default 1)"}, {"num-kv-blocks", "KV blocks (overrides memory)"},
    {"sink-router", "off (default) or on: SinkRouter decode routing (per request: \"sink_router\")"},
    {"sink-router-config", "SinkRouter thresholds, e.g. configs/<model>/sink_router.json from vlm-calibrate-sink"},
    {"max-waiting", "waiting queue bound (default 1024)"},
    {"enable-prefix-caching", "reuse the KV of cached prompt prefixes (default on, as vLLM's V1 engine; "
                              "--no-enable-prefix-caching turns it off; per request: \"cache_salt\")"},
    {"threads", "compute threads (default: all cores)"}, {"log-level", "trace..off (default info)"},
    {"allowed-media-domains", "comma-separated hosts media may come from"},
    {"allowed-local-media-path", "directory file:// media may come from"},
    {"drain-timeout", "seconds to finish requests on SIGTERM (default 30)"},
    {"failure-exit-delay", "seconds /health answers 503 after an engine failure (a GPU error) before the process "
                           "exits 3 (default 2)"},
    {"debug-fail-step", "tests only: the backend's forward N fails as a broken GPU would (default 0: off)"},
    {"listen-while-loading", "on (default): every route answers 503 (Retry-After) while loading; off: the port opens "
                             "when ready"},
    {"chat-template-content-format", "auto (default: from the chat template), string or openai: how message content "
                                     "reaches the chat template (as vLLM's flag)"},
    {"max-images-per-request", "images in one chat request (default 8)"},
    {"max-image-bytes", "encoded bytes of one image (default 20 MiB)"},
    {"max-image-pixels", "width x height of one image (default 64 Mi)"},
    {"mm-processor-cache-gb", "preprocessed images kept by their bytes' hash, GiB (default 4, as vLLM; 0: off)"},
    {"media-workers", "threads that handle chat requests with media (fetch, decode, preprocess) off the HTTP "
                      "threads (default 2; 0: on the HTTP threads)"},
    {"media-queue", "chat requests with media that may wait for a media worker; beyond: 503 with Retry-After "
                    "(default 16)"},
    {"max-videos-per-request", "videos in one chat request (default 4; Qwen2-VL family)"},
    {"max-video-frames", "frames of one video (default 32; Qwen2-VL family)"},
    {"max-video-bytes", "encoded bytes of one video file (default 64 MiB)"},
    {"max-video-seconds", "duration of one video file (default 600)"},
    {"max-video-file-frames", "frames in one video file, before sampling (default 7200)"},
    {"video-decode-timeout-ms", "to probe and decode one video file (default 30000)"},
    {"video-total-pixels", "pixels of all sampled frames of one video file, capping each frame's size (default "
                           "90316800, qwen-vl-utils' VIDEO_TOTAL_PIXELS; Qwen2-VL family)"},
    {"gpu-media-preprocess", "with --device cuda, Qwen2-VL-family and Qwen3-VL images and video frames go to the GPU as 8-bit "
                             "frames and are resized, normalized and patchified there per encode unit (default 1; "
                             "0: on the CPU, as on the CPU backend)"},
    {"max-body-bytes", "request body (default 32 MiB; larger: 413)"},
    {"max-header-bytes", "request headers (default 16 KiB; larger: 431)"},
    {"read-timeout-ms", "to read one request (default 30000)"},
    {"idle-timeout-ms", "between keep-alive requests (default 60000)"},
    {"write-timeout-ms", "for one write to a slow reader (default 60000)"},
    {"max-requests-per-connection", "keep-alive requests per connection (default 1000)"},
    {"media-connect-timeout-ms", "connecting to a media URL (default 5000)"},
    {"media-timeout-ms", "whole media fetch (default 20000)"},
    {"max-media-redirects", "redirects per media fetch (default 3)"},
    {"look-m", "LOOK-M KV compression: off (default), text-prior-pivot, text-prior-avg, text-prior-weighted, "
               "text-prior-h2o, pivot, avg, weighted, h2o"},
    {"look-m-recent-ratio", "LOOK-M recent window share (default 0.1)"},
    {"look-m-important-ratio", "LOOK-M important-token share (default 0.1)"},
    {"look-m-scores", "LOOK-M scores: window (default) or full"},
    {"look-m-text-only", "1: LOOK-M compresses text-only prompts too (default 0)"},
    {"sparse-prefill", "off (default), a_shape, tri_shape, vertical_slash, grid, xattention, mminference "
                       "(per request: \"vlm_options\": {\"sparse_prefill\": ...})"},
    {"sparse-prefill-config", "per-head pattern file (tools/vlm-search-patterns); implies mminference"},
    {"sparse-prefill-min-len", "prompts shorter than this stay dense (default 4096)"},
    {"sparse-prefill-grid-search", "prompt (default): grid heads search once per prompt, on its first chunk, later "
                                   "chunks reuse the layouts; chunk: every prefill chunk searches (--device cuda; "
                                   "the CPU searches every chunk)"},
    {"no-webui", "no web playground at / (a bare --no-webui, or 1/0)"},
};

const vlm::cli::FlagParser& cli() {
  static const vlm::cli::FlagParser parser("vlm-server --model DIR [flags]", [] {
    vlm::cli::FlagTable t = kFlags;
    vlm::cli::add_backend_flags(t);
    return t;
  }());
  return parser;
}

[[noreturn]] void usage(const std::string& error) { cli().fail(error); }

// vLLM's boolean switches: `--NAME` / `--no-NAME` without a value become `--NAME=1` / `--NAME=0`.
std::vector<std::string> expand_switches(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args)
    if (a == "--enable-prefix-caching" || a == "--enforce-eager") a += "=1";
    else if (a == "--no-enable-prefix-caching") a = "--enable-prefix-caching=0";
  return args;
}

bool bool_flag(const std::map<std::string, std::string>& f, const std::string& k, bool fallback) {
  auto it = f.find(k);
  if (it == f.end()) return fallback;
  const std::string& v = it->second;
  if (v == "1" || v == "true" || v == "on") return true;
  if (v == "0" || v == "false" || v == "off") return false;
  cli().fail("--" + k + " must be 1/true/on or 0/false/off, got '" + v + "'");
}

std::map<std::string, std::string> parse_flags(int argc, char** argv) {
  // --no-webui may come bare (llama.cpp's spelling): give it the value 1; vLLM's switches
  // --[no-]enable-prefix-caching become --enable-prefix-caching=1/0 (expand_switches).
  std::vector<std::string> args = expand_switches(argc, argv);
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i] == "--no-webui" && (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0))
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(++i), "1");
  std::vector<char*> arg_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  std::map<std::string, std::string> flags =
      cli().parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data(), /*last_wins=*/true);
  for (const auto& [k, help] : kFlags) {
    std::string env = "VLM_SERVER_";
    for (char c : k) env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (const char* v = std::getenv(env.c_str()); v && !flags.count(k)) flags[k] = v;
  }
  if (flags.count("config")) {
    std::ifstream in(flags["config"]);
    if (!in) usage("cannot open --config " + flags["config"]);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      usage("--config " + flags["config"] + ": " + e.what());
    }
    if (!j.is_object()) usage("--config must hold a JSON object");
    for (const auto& [k, v] : j.items()) {
      std::string key = k;
      for (auto& c : key) if (c == '_') c = '-';
      if (!kFlags.count(key) || key == "config") usage("--config: unknown key '" + k + "'");
      if (!flags.count(key)) flags[key] = v.is_string() ? v.get<std::string>() : v.dump();
    }
  }
  if (!flags.count("model")) usage("--model is required");
  return flags;
}

int64_t int_flag(const std::map<std::string, std::string>& f, const std::string& k, int64_t fallback, int64_t min) {
  auto it = f.find(k);
  return it == f.end() ? fallback : cli().integer(k, it->second, min);
}

double float_flag(const std::map<std::string, std::string>& f, const std::string& k, double fallback) {
  auto it = f.find(k);
  return it == f.end() ? fallback : cli().number(k, it->second, 0.0, std::numeric_limits<double>::infinity(), true);
}

bool bool_flag(const std::map<std::string, std::string>& f, const std::string& k) {
  auto it = f.find(k);
  if (it == f.end()) return false;
  if (it->second == "1" || it->second == "true" || it->second == "on") return true;
  if (it->second == "0" || it->second == "false" || it->second == "off") return false;
  usage("--" + k + " takes 1/0 (or true/false, on/off), got '" + it->second + "'");
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

// Reads every page of the mapped weights once, with a progress bar: the first requests then
// do not pay for page faults, and a truncated or unreadable file shows up now.
void warm_weights(const vlm::LlmDecoder& decoder) {
  const auto& tensors = decoder.weights().tensors();
  int64_t total = 0, done = 0;
  for (const auto& [name, t] : tensors) total += t.nbytes();
  const bool tty = isatty(2);
  int last_pct = -1;
  volatile unsigned char sink = 0;
  for (const auto& [name, t] : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    for (int64_t i = 0; i < t.nbytes(); i += 4096) sink = sink + p[i];
    done += t.nbytes();
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (pct != last_pct && (tty || pct == 100)) {
      const int bar = pct / 4;
      std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%% (%.1f MiB)", bar, "#########################", 25 - bar, "",
                   pct, static_cast<double>(done) / (1 << 20));
      last_pct = pct;
    }
  }
  std::fprintf(stderr, "\n");
}

int g_signal_pipe[2] = {-1, -1};
constexpr unsigned char kEngineFailed = 0xfe;  // on the signal pipe: the engine failed for good
constexpr int kExitEngineFailed = 3;

void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
}

// After the engine failed for good: /health already answers 503 (ApiServer reads
// EngineLoop::failed); the replies in flight (500s, error events) go out within --drain-timeout,
// then the server keeps answering 503 for --failure-exit-delay seconds (a signal ends that early)
// and the process exits kExitEngineFailed.
int exit_after_failure(double drain_s, double delay_s, vlm::EngineLoop& loop, vlm::HttpServer& server) {
  VLM_LOG_ERROR("the engine failed: {}; /health answers 503; exiting {} once the replies are out", loop.failure(),
                kExitEngineFailed);
  const auto now = [] { return std::chrono::steady_clock::now(); };
  const auto drain_end = now() + std::chrono::duration<double>(drain_s);
  while (server.active_requests() > 0 && now() < drain_end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto linger_end = now() + std::chrono::duration<double>(delay_s);
  while (now() < linger_end) {
    pollfd p{g_signal_pipe[0], POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(linger_end - now()).count();
    if (poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 1, 1000))) > 0) break;  // SIGTERM: go now
  }
  server.stop();
  loop.stop();
  VLM_LOG_ERROR("exiting {} after the engine failure", kExitEngineFailed);
  return kExitEngineFailed;
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = parse_flags(argc, argv);
  // SIGINT/SIGTERM may land on any thread (libraries start threads of their own before main), so
  // the handler only writes the signal number to a pipe that main waits on.
  if (pipe(g_signal_pipe) != 0) return 3;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  return vlm::cli::run_tool([&]() -> int {
    vlm::set_log_level(flags.count("log-level") ? flags.at("log-level") : "info");
    if (flags.count("threads")) vlm::set_num_threads(static_cast<int>(int_flag(flags, "threads", 1, 1)));
    const std::string model_dir = flags.at("model");

    vlm::ApiServerOptions api;
    api.model_root = model_dir;
    api.served_model_name = flags.count("served-model-name") ? flags.at("served-model-name") : model_dir;
    api.api_key = flags.count("api-key") ? flags.at("api-key") : "";
    if (flags.count("allowed-media-domains")) api.media.allowed_domains = split_commas(flags.at("allowed-media-domains"));
    if (flags.count("allowed-local-media-path")) api.media.allowed_local_path = flags.at("allowed-local-media-path");
    if (flags.count("chat-template-content-format")) {
      try {
        api.chat_content_format = vlm::parse_chat_content_format(flags.at("chat-template-content-format"));
      } catch (const std::invalid_argument&) {
        usage("--chat-template-content-format must be auto, string or openai");
      }
    }
    api.max_images_per_request = static_cast<int>(int_flag(flags, "max-images-per-request", 8, 0));
    api.max_videos_per_request = static_cast<int>(int_flag(flags, "max-videos-per-request", 4, 0));
    api.media_workers = static_cast<int>(int_flag(flags, "media-workers", api.media_workers, 0));
    api.media_queue = static_cast<int>(int_flag(flags, "media-queue", api.media_queue, 0));
    const int max_video_frames = static_cast<int>(int_flag(flags, "max-video-frames", 32, 1));
    const int64_t video_total_pixels = int_flag(flags, "video-total-pixels", 90316800, 1);
    api.image_limits.max_bytes = int_flag(flags, "max-image-bytes", api.media.max_bytes, 1);
    api.image_limits.max_pixels = int_flag(flags, "max-image-pixels", api.image_limits.max_pixels, 1);
    api.media.max_bytes = api.image_limits.max_bytes;
    if (flags.count("mm-processor-cache-gb"))
      api.mm_processor_cache_bytes = static_cast<int64_t>(
          cli().number("mm-processor-cache-gb", flags.at("mm-processor-cache-gb"), 0.0, 1 << 20) * (1ll << 30));
    vlm::VideoLimits video_limits;
    video_limits.max_bytes = int_flag(flags, "max-video-bytes", video_limits.max_bytes, 1);
    video_limits.max_pixels = api.image_limits.max_pixels;
    video_limits.max_seconds = static_cast<double>(int_flag(flags, "max-video-seconds", 600, 1));
    video_limits.max_frames = int_flag(flags, "max-video-file-frames", video_limits.max_frames, 1);
    video_limits.timeout_ms = int_flag(flags, "video-decode-timeout-ms", video_limits.timeout_ms, 1);
    api.media.connect_timeout_ms = static_cast<int>(int_flag(flags, "media-connect-timeout-ms", api.media.connect_timeout_ms, 1));
    api.media.total_timeout_ms = static_cast<int>(int_flag(flags, "media-timeout-ms", api.media.total_timeout_ms, 1));
    api.media.max_redirects = static_cast<int>(int_flag(flags, "max-media-redirects", api.media.max_redirects, 0));

    vlm::HttpServerOptions http;
    http.host = flags.count("host") ? flags.at("host") : "127.0.0.1";
    http.port = static_cast<int>(int_flag(flags, "port", 8000, 0));
    http.max_body_bytes = static_cast<size_t>(int_flag(flags, "max-body-bytes", static_cast<int64_t>(http.max_body_bytes), 1));
    http.max_header_bytes = static_cast<size_t>(int_flag(flags, "max-header-bytes", static_cast<int64_t>(http.max_header_bytes), 1));
    http.read_timeout_ms = static_cast<int>(int_flag(flags, "read-timeout-ms", http.read_timeout_ms, 1));
    http.idle_timeout_ms = static_cast<int>(int_flag(flags, "idle-timeout-ms", http.idle_timeout_ms, 1));
    http.write_timeout_ms = static_cast<int>(int_flag(flags, "write-timeout-ms", http.write_timeout_ms, 1));
    http.max_requests_per_connection =
        static_cast<int>(int_flag(flags, "max-requests-per-connection", http.max_requests_per_connection, 1));
    vlm::Router router;

    // The HTTP side comes up first so /health answers 503 while the model loads.
    std::unique_ptr<vlm::HttpServer> server;
    vlm::EngineConfig ec;
    ec.block_size = static_cast<int>(int_flag(flags, "block-size", 16, 1));
    ec.num_kv_blocks = int_flag(flags, "num-kv-blocks", 0, 1);
    ec.kv_cache_memory_gib = float_flag(flags, "kv-cache-memory-gib", 1.0);
    ec.max_model_len = int_flag(flags, "max-model-len", 0, 1);
    ec.scheduler.max_num_seqs = static_cast<int>(int_flag(flags, "max-num-seqs", 256, 1));
    ec.scheduler.max_num_batched_tokens = static_cast<int>(int_flag(flags, "max-num-batched-tokens", 2048, 1));
    // By default a long prompt leaves a quarter of the step's budget to requests waiting beside it.
    ec.scheduler.long_prefill_token_threshold = static_cast<int>(
        int_flag(flags, "long-prefill-token-threshold", ec.scheduler.max_num_batched_tokens * 3 / 4, 0));
    ec.scheduler.max_waiting = static_cast<int>(int_flag(flags, "max-waiting", 1024, 1));
    // auto: the backend's (the Engine resolves it: kCudaPrefillOnlyBatchedTokens on the GPU, off on the CPU).
    if (!flags.count("prefill-only-batched-tokens") || flags.at("prefill-only-batched-tokens") == "auto") {
      ec.scheduler.prefill_only_batched_tokens = vlm::kPrefillOnlyTokensAuto;
    } else {
      const int64_t v = int_flag(flags, "prefill-only-batched-tokens", 0, 0);
      if (v > (1 << 24)) usage("--prefill-only-batched-tokens " + std::to_string(v) + ": at most 16777216");
      ec.scheduler.prefill_only_batched_tokens = static_cast<int>(v);
    }
    if (const std::string e = vlm::scheduler_config_error(ec.scheduler); !e.empty()) usage(e);
    ec.enable_prefix_caching = bool_flag(flags, "enable-prefix-caching", true);
    vlm::cli::apply_backend_flags(flags, cli(), ec);
    ec.debug_fail_step = int_flag(flags, "debug-fail-step", 0, 0);
    const double failure_exit_delay =
        flags.count("failure-exit-delay") ? cli().number("failure-exit-delay", flags.at("failure-exit-delay"), 0.0, 86400.0)
                                          : 2.0;
    if (flags.count("look-m") && flags.at("look-m") != "off") {
      auto p = vlm::look_m_mode_from_name(flags.at("look-m"));
      if (!p) usage("--look-m: unknown mode '" + flags.at("look-m") + "'");
      ec.look_m = {true, *p};
    }
    ec.look_m.params.recent_ratio = float_flag(flags, "look-m-recent-ratio", ec.look_m.params.recent_ratio);
    ec.look_m.params.important_ratio = float_flag(flags, "look-m-important-ratio", ec.look_m.params.important_ratio);
    if (flags.count("look-m-scores")) {
      auto s = vlm::look_m_scores_from_name(flags.at("look-m-scores"));
      if (!s) usage("--look-m-scores must be window or full");
      ec.look_m.params.scores = *s;
    }
    ec.look_m.params.text_only_prompts = int_flag(flags, "look-m-text-only", 0, 0) != 0;
    if (const std::string e = vlm::look_m_params_error(ec.look_m.params); !e.empty()) usage("--look-m: " + e);
    if (flags.count("sink-router")) {
      const std::string& v = flags.at("sink-router");
      if (v != "on" && v != "off") usage("--sink-router must be on or off");
      ec.sink_router = v == "on";
    }
    if (flags.count("sink-router-config")) {
      const auto& c = ec.sink_router_config = vlm::load_sink_router_config(flags.at("sink-router-config"));
      VLM_LOG_INFO("SinkRouter config {} ({} by default): tau(L) = clamp({} + {} x + {} x^2 + {} x^3, {}, {}), x = L / {}; "
                   "{} aggregation, {} surrogate, first {} layers dense",
                   flags.at("sink-router-config"), ec.sink_router ? "on" : "off", c.c0, c.c1, c.c2, c.c3, c.tau_min,
                   c.tau_max, c.length_ref, vlm::sink_aggregation_name(c.aggregation),
                   vlm::sink_surrogate_name(c.surrogate), c.num_dense_layers);
    }
    if (flags.count("sparse-prefill")) {
      const auto m = vlm::parse_sparse_prefill_method(flags.at("sparse-prefill"));
      if (!m) usage("--sparse-prefill: unknown method '" + flags.at("sparse-prefill") + "'");
      ec.sparse_prefill.method = *m;
    }
    if (flags.count("sparse-prefill-config")) {
      ec.sparse_prefill.head_patterns = std::make_shared<const vlm::SparseHeadPatterns>(
          vlm::load_sparse_patterns(flags.at("sparse-prefill-config")));
      if (!flags.count("sparse-prefill")) ec.sparse_prefill.method = vlm::SparsePrefillMethod::MMInference;
    }
    ec.sparse_prefill.min_prompt_len =
        static_cast<int>(int_flag(flags, "sparse-prefill-min-len", ec.sparse_prefill.min_prompt_len, 0));
    if (flags.count("sparse-prefill-grid-search")) {
      const std::string& v = flags.at("sparse-prefill-grid-search");
      if (v != "chunk" && v != "prompt") usage("--sparse-prefill-grid-search must be chunk or prompt");
      ec.sparse_prefill.grid_search_once = v == "prompt";
    }

    vlm::Router loading_router;
    // Until the model is ready every request answers 503 with Retry-After (clients and load
    // balancers retry a 503; they give up on a 404).
    vlm::ApiServer::register_loading_routes(loading_router);
    const std::string listen_while_loading = flags.count("listen-while-loading") ? flags.at("listen-while-loading") : "on";
    if (listen_while_loading != "on" && listen_while_loading != "off") usage("--listen-while-loading must be on or off");
    std::unique_ptr<vlm::HttpServer> loading;
    if (listen_while_loading == "on") {
      loading = std::make_unique<vlm::HttpServer>(http, loading_router);
      loading->start();
      VLM_LOG_INFO("loading {} (health answers 503 until ready)", model_dir);
      std::fprintf(stderr, "loading: http://%s:%d\n", http.host.c_str(), loading->port());
    } else {
      VLM_LOG_INFO("loading {} (the port opens when ready)", model_dir);
    }

    std::shared_ptr<const vlm::Tokenizer> tokenizer;
    if (std::ifstream(model_dir + "/tokenizer.json")) tokenizer = vlm::Tokenizer::load(model_dir);
    else VLM_LOG_WARN("{} has no tokenizer.json: only token-id prompts will work", model_dir);
    std::optional<vlm::ChatTemplate> chat_template = vlm::ChatTemplate::load(model_dir);
    std::unique_ptr<vlm::Engine> engine;
    const vlm::WeightLoadOptions load = vlm::cli::load_options(flags, cli(), ec);  // --load-format
    switch (vlm::detect_architecture(model_dir)) {
      case vlm::ModelArchitecture::CausalLM: {
        auto decoder = vlm::LlmDecoder::load(model_dir, load);
        warm_weights(*decoder);
        engine = std::make_unique<vlm::Engine>(ec, std::move(decoder), vlm::make_text_decoder_factory(tokenizer));
        break;
      }
      case vlm::ModelArchitecture::Llava: {
        auto model = vlm::LlavaModel::load(model_dir, load);
        warm_weights(model->decoder());
        vlm::ImageInputOptions images;
        images.preprocess = vlm::ImagePreprocessConfig::load(model_dir);
        images.image_token_id = model->image_token_id();
        images.tokens_per_image = model->tokens_per_image();
        const auto [h, w] = images.preprocess.output_size_for(1, 1);
        if (h != model->image_size() || w != model->image_size())
          throw vlm::LoadError(fmt::format("{}: the image processor's images come out {}x{}, the vision tower takes {}x{}",
                                           model_dir, h, w, model->image_size(), model->image_size()));
        api.images = images;
        engine = std::make_unique<vlm::Engine>(ec, std::unique_ptr<vlm::Model>(std::move(model)),
                                               vlm::make_text_decoder_factory(tokenizer));
        break;
      }
      case vlm::ModelArchitecture::Qwen2VL: {
        auto model = vlm::Qwen2VLModel::load(model_dir, load);
        warm_weights(model->decoder());
        vlm::Qwen2VLMediaOptions media;
        media.image = vlm::Qwen2VLPreprocessConfig::load(model_dir, /*video=*/false);
        media.video = vlm::Qwen2VLPreprocessConfig::load(model_dir, /*video=*/true);
        media.image_token_id = model->image_token_id();
        media.video_token_id = model->video_token_id();
        media.max_video_frames = max_video_frames;
        media.video_total_pixels = video_total_pixels;
        media.sampling = vlm::VideoSamplingParams::load(model_dir);
        media.video_limits = video_limits;
        // The 8-bit form only where the CUDA backend's encoder preprocesses (the engine resolves
        // --device auto the same way; under tensor parallelism too: each encoder GPU preprocesses).
        media.gpu_preprocess = bool_flag(flags, "gpu-media-preprocess", true) &&
                               (ec.device == vlm::Device::Cuda || (ec.device == vlm::Device::Auto && vlm::cuda_available()));
        const vlm::Qwen2VisionConfig& vc = model->config().vision;
        for (const auto* p : {&media.image, &media.video})
          if (p->patch_size != vc.patch_size || p->merge_size != vc.spatial_merge_size ||
              p->temporal_patch_size != vc.temporal_patch_size)
            throw vlm::LoadError(fmt::format("{}: the preprocessor's patch/merge/temporal sizes {}/{}/{} are not the "
                                             "vision tower's {}/{}/{}",
                                             model_dir, p->patch_size, p->merge_size, p->temporal_patch_size,
                                             vc.patch_size, vc.spatial_merge_size, vc.temporal_patch_size));
        api.qwen2vl = media;
        engine = std::make_unique<vlm::Engine>(ec, std::unique_ptr<vlm::Model>(std::move(model)),
                                               vlm::make_text_decoder_factory(tokenizer));
        break;
      }
      case vlm::ModelArchitecture::Qwen3VL: {
        auto model = vlm::Qwen3VLModel::load(model_dir, load);
        warm_weights(model->decoder());
        // Images as Qwen2VLImageProcessor with the checkpoint's 16-px settings, videos as
        // Qwen3VLVideoProcessor (timestamps per temporal group); in the 8-bit form where the CUDA
        // backend's encoder preprocesses (as Qwen2-VL's), else as rows.
        vlm::Qwen3VLMediaOptions media;
        media.gpu_preprocess = bool_flag(flags, "gpu-media-preprocess", true) &&
                               (ec.device == vlm::Device::Cuda || (ec.device == vlm::Device::Auto && vlm::cuda_available()));
        media.image.image = vlm::Qwen2VLPreprocessConfig::load(model_dir, /*video=*/false);
        media.image.video = media.image.image;
        media.image.image_token_id = model->image_token_id();
        media.image.video_token_id = model->video_token_id();
        media.video = vlm::Qwen3VLVideoConfig::load(model_dir);
        media.max_video_frames = max_video_frames;
        media.video_limits = video_limits;
        const vlm::Qwen3VLVisionConfig& vc = model->config().vision;
        for (const auto* p : {&media.image.image, &media.video.base})
          if (p->patch_size != vc.patch_size || p->merge_size != vc.spatial_merge_size ||
              p->temporal_patch_size != vc.temporal_patch_size)
            throw vlm::LoadError(fmt::format("{}: the processor's patch/merge/temporal sizes {}/{}/{} are not the "
                                             "vision tower's {}/{}/{}",
                                             model_dir, p->patch_size, p->merge_size, p->temporal_patch_size,
                                             vc.patch_size, vc.spatial_merge_size, vc.temporal_patch_size));
        api.qwen3vl = media;
        engine = std::make_unique<vlm::Engine>(ec, std::unique_ptr<vlm::Model>(std::move(model)),
                                               vlm::make_text_decoder_factory(tokenizer));
        break;
      }
      case vlm::ModelArchitecture::LlavaOnevision: {
        auto model = vlm::LlavaOnevisionModel::load(model_dir, load);
        warm_weights(model->decoder());
        vlm::OnevisionMediaOptions media;
        media.image = vlm::OnevisionPreprocessConfig::load(model_dir, /*video=*/false);
        media.video = vlm::OnevisionPreprocessConfig::load(model_dir, /*video=*/true);
        media.image_token_id = model->image_token_id();
        media.video_token_id = model->video_token_id();
        media.grid = model->grid();
        media.max_num_patches = model->config().max_num_patches;
        media.max_video_frames = max_video_frames;
        for (const auto* p : {&media.image, &media.video})
          if (p->size != model->tile_size())
            throw vlm::LoadError(fmt::format("{}: the processor makes {}px tiles, the vision tower takes {}px", model_dir,
                                             p->size, model->tile_size()));
        api.onevision = media;
        engine = std::make_unique<vlm::Engine>(ec, std::unique_ptr<vlm::Model>(std::move(model)),
                                               vlm::make_text_decoder_factory(tokenizer));
        break;
      }
    }
    // An engine that failed for good (EngineLoop::failed) wakes the wait below as a signal would.
    vlm::EngineLoop loop(std::move(engine), [] {
      const unsigned char b = kEngineFailed;
      [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
    });
    vlm::ApiServer api_server(api, loop, tokenizer, std::move(chat_template), vlm::SamplingDefaults::load(model_dir));
    api_server.register_routes(router);
    if (!bool_flag(flags, "no-webui")) vlm::register_web_ui(router);

    // Swap the loading server for the real one on the same port.
    if (loading) {
      http.port = loading->port();
      loading->stop();
      loading.reset();
    }
    server = std::make_unique<vlm::HttpServer>(http, router);
    server->start();
    api_server.set_ready(true);
    VLM_LOG_INFO("serving '{}' on http://{}:{}", api.served_model_name, http.host, server->port());
    std::fprintf(stderr, "ready: http://%s:%d\n", http.host.c_str(), server->port());

    unsigned char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) != 1) {
    }
    if (sig == kEngineFailed)
      return exit_after_failure(float_flag(flags, "drain-timeout", 30.0), failure_exit_delay, loop, *server);
    VLM_LOG_INFO("signal {}: draining", sig);
    api_server.set_draining(true);
    server->stop_accepting();
    const double grace = float_flag(flags, "drain-timeout", 30.0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
    while (server->active_requests() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (server->active_requests() > 0) VLM_LOG_WARN("{} requests still running after {} s; stopping", server->active_requests(), grace);
    server->stop();
    loop.stop();
    VLM_LOG_INFO("stopped");
    return loop.failed() ? kExitEngineFailed : 0;  // a signal that came before the failure's wake-up
  });
}
