// vlm-server's flag table and the option structs made from it (the contract is in server_flags.h).
#include "tools/vlm-server/server_flags.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "kernels/core/log.h"
#include "model/methods/sink_router_config_file.h"
#include "model/methods/sparse_patterns_file.h"
#include "tools/common/backend_flags.h"

namespace vlm::server_cli {
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

// vLLM's boolean switches: `--NAME` / `--no-NAME` without a value become `--NAME=1` / `--NAME=0`;
// llama.cpp's bare --no-webui becomes --no-webui 1.
std::vector<std::string> expand_switches(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args)
    if (a == "--enable-prefix-caching" || a == "--enforce-eager") a += "=1";
    else if (a == "--no-enable-prefix-caching") a = "--enable-prefix-caching=0";
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i] == "--no-webui" && (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0))
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(++i), "1");
  return args;
}

}  // namespace

const cli::FlagParser& ServerFlags::parser() {
  static const cli::FlagParser p("vlm-server --model DIR [flags]", [] {
    cli::FlagTable t = kFlags;
    cli::add_backend_flags(t);
    return t;
  }());
  return p;
}

void ServerFlags::usage(const std::string& error) const { parser().fail(error); }

ServerFlags ServerFlags::parse(int argc, char** argv) {
  std::vector<std::string> args = expand_switches(argc, argv);
  std::vector<char*> arg_ptrs;
  for (auto& a : args) arg_ptrs.push_back(a.data());
  ServerFlags out;
  auto& flags = out.flags_ = parser().parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data(), /*last_wins=*/true);
  for (const auto& [k, help] : kFlags) {
    std::string env = "VLM_SERVER_";
    for (char c : k) env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (const char* v = std::getenv(env.c_str()); v && !flags.count(k)) flags[k] = v;
  }
  if (flags.count("config")) {
    std::ifstream in(flags["config"]);
    if (!in) out.usage("cannot open --config " + flags["config"]);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      out.usage("--config " + flags["config"] + ": " + e.what());
    }
    if (!j.is_object()) out.usage("--config must hold a JSON object");
    for (const auto& [k, v] : j.items()) {
      std::string key = k;
      for (auto& c : key) if (c == '_') c = '-';
      if (!kFlags.count(key) || key == "config") out.usage("--config: unknown key '" + k + "'");
      if (!flags.count(key)) flags[key] = v.is_string() ? v.get<std::string>() : v.dump();
    }
  }
  if (!flags.count("model")) out.usage("--model is required");
  return out;
}

std::string ServerFlags::str(const std::string& name, const std::string& fallback) const {
  auto it = flags_.find(name);
  return it == flags_.end() ? fallback : it->second;
}

int64_t ServerFlags::integer(const std::string& name, int64_t fallback, int64_t min) const {
  auto it = flags_.find(name);
  return it == flags_.end() ? fallback : parser().integer(name, it->second, min);
}

double ServerFlags::positive(const std::string& name, double fallback) const {
  auto it = flags_.find(name);
  return it == flags_.end() ? fallback
                            : parser().number(name, it->second, 0.0, std::numeric_limits<double>::infinity(), true);
}

bool ServerFlags::boolean(const std::string& name, bool fallback) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) return fallback;
  const std::string& v = it->second;
  if (v == "1" || v == "true" || v == "on") return true;
  if (v == "0" || v == "false" || v == "off") return false;
  usage("--" + name + " must be 1/true/on or 0/false/off, got '" + v + "'");
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

ApiServerOptions api_options(const ServerFlags& f) {
  ApiServerOptions api;
  api.model_root = f.str("model");
  api.served_model_name = f.str("served-model-name", api.model_root);
  api.api_key = f.str("api-key", "");
  if (f.has("allowed-media-domains")) api.media.allowed_domains = split_commas(f.str("allowed-media-domains"));
  if (f.has("allowed-local-media-path")) api.media.allowed_local_path = f.str("allowed-local-media-path");
  if (f.has("chat-template-content-format")) {
    try {
      api.chat_content_format = parse_chat_content_format(f.str("chat-template-content-format"));
    } catch (const std::invalid_argument&) {
      f.usage("--chat-template-content-format must be auto, string or openai");
    }
  }
  api.max_images_per_request = static_cast<int>(f.integer("max-images-per-request", 8, 0));
  api.max_videos_per_request = static_cast<int>(f.integer("max-videos-per-request", 4, 0));
  api.media_workers = static_cast<int>(f.integer("media-workers", api.media_workers, 0));
  api.media_queue = static_cast<int>(f.integer("media-queue", api.media_queue, 0));
  api.image_limits.max_bytes = f.integer("max-image-bytes", api.media.max_bytes, 1);
  api.image_limits.max_pixels = f.integer("max-image-pixels", api.image_limits.max_pixels, 1);
  api.media.max_bytes = api.image_limits.max_bytes;
  if (f.has("mm-processor-cache-gb"))
    api.mm_processor_cache_bytes = static_cast<int64_t>(
        ServerFlags::parser().number("mm-processor-cache-gb", f.str("mm-processor-cache-gb"), 0.0, 1 << 20) *
        (1ll << 30));
  api.media.connect_timeout_ms = static_cast<int>(f.integer("media-connect-timeout-ms", api.media.connect_timeout_ms, 1));
  api.media.total_timeout_ms = static_cast<int>(f.integer("media-timeout-ms", api.media.total_timeout_ms, 1));
  api.media.max_redirects = static_cast<int>(f.integer("max-media-redirects", api.media.max_redirects, 0));
  return api;
}

MediaFlags media_flags(const ServerFlags& f, const ApiServerOptions& api) {
  MediaFlags m;
  m.max_video_frames = static_cast<int>(f.integer("max-video-frames", m.max_video_frames, 1));
  m.video_total_pixels = f.integer("video-total-pixels", m.video_total_pixels, 1);
  m.video_limits.max_bytes = f.integer("max-video-bytes", m.video_limits.max_bytes, 1);
  m.video_limits.max_pixels = api.image_limits.max_pixels;
  m.video_limits.max_seconds = static_cast<double>(f.integer("max-video-seconds", 600, 1));
  m.video_limits.max_frames = f.integer("max-video-file-frames", m.video_limits.max_frames, 1);
  m.video_limits.timeout_ms = f.integer("video-decode-timeout-ms", m.video_limits.timeout_ms, 1);
  m.gpu_preprocess = f.boolean("gpu-media-preprocess", true);
  return m;
}

HttpServerOptions http_options(const ServerFlags& f) {
  HttpServerOptions http;
  http.host = f.str("host", "127.0.0.1");
  http.port = static_cast<int>(f.integer("port", 8000, 0));
  http.max_body_bytes = static_cast<size_t>(f.integer("max-body-bytes", static_cast<int64_t>(http.max_body_bytes), 1));
  http.max_header_bytes =
      static_cast<size_t>(f.integer("max-header-bytes", static_cast<int64_t>(http.max_header_bytes), 1));
  http.read_timeout_ms = static_cast<int>(f.integer("read-timeout-ms", http.read_timeout_ms, 1));
  http.idle_timeout_ms = static_cast<int>(f.integer("idle-timeout-ms", http.idle_timeout_ms, 1));
  http.write_timeout_ms = static_cast<int>(f.integer("write-timeout-ms", http.write_timeout_ms, 1));
  http.max_requests_per_connection =
      static_cast<int>(f.integer("max-requests-per-connection", http.max_requests_per_connection, 1));
  return http;
}

namespace {

void scheduler_flags(const ServerFlags& f, EngineConfig& ec) {
  SchedulerConfig& s = ec.scheduler;
  s.max_num_seqs = static_cast<int>(f.integer("max-num-seqs", 256, 1));
  s.max_num_batched_tokens = static_cast<int>(f.integer("max-num-batched-tokens", 2048, 1));
  // By default a long prompt leaves a quarter of the step's budget to requests waiting beside it.
  s.long_prefill_token_threshold =
      static_cast<int>(f.integer("long-prefill-token-threshold", s.max_num_batched_tokens * 3 / 4, 0));
  s.max_waiting = static_cast<int>(f.integer("max-waiting", 1024, 1));
  // auto: the backend's (the Engine resolves it: kCudaPrefillOnlyBatchedTokens on the GPU, off on the CPU).
  if (f.str("prefill-only-batched-tokens", "auto") == "auto") {
    s.prefill_only_batched_tokens = kPrefillOnlyTokensAuto;
  } else {
    const int64_t v = f.integer("prefill-only-batched-tokens", 0, 0);
    if (v > (1 << 24)) f.usage("--prefill-only-batched-tokens " + std::to_string(v) + ": at most 16777216");
    s.prefill_only_batched_tokens = static_cast<int>(v);
  }
  if (const std::string e = scheduler_config_error(s); !e.empty()) f.usage(e);
}

void look_m_flags(const ServerFlags& f, EngineConfig& ec) {
  if (f.has("look-m") && f.str("look-m") != "off") {
    auto p = look_m_mode_from_name(f.str("look-m"));
    if (!p) f.usage("--look-m: unknown mode '" + f.str("look-m") + "'");
    ec.look_m = {true, *p};
  }
  LookMParams& p = ec.look_m.params;
  p.recent_ratio = f.positive("look-m-recent-ratio", p.recent_ratio);
  p.important_ratio = f.positive("look-m-important-ratio", p.important_ratio);
  if (f.has("look-m-scores")) {
    auto s = look_m_scores_from_name(f.str("look-m-scores"));
    if (!s) f.usage("--look-m-scores must be window or full");
    p.scores = *s;
  }
  p.text_only_prompts = f.integer("look-m-text-only", 0, 0) != 0;
  if (const std::string e = look_m_params_error(p); !e.empty()) f.usage("--look-m: " + e);
}

void sink_router_flags(const ServerFlags& f, EngineConfig& ec) {
  if (f.has("sink-router")) {
    const std::string& v = f.str("sink-router");
    if (v != "on" && v != "off") f.usage("--sink-router must be on or off");
    ec.sink_router = v == "on";
  }
  if (f.has("sink-router-config")) {
    const auto& c = ec.sink_router_config = load_sink_router_config(f.str("sink-router-config"));
    VLM_LOG_INFO("SinkRouter config {} ({} by default): tau(L) = clamp({} + {} x + {} x^2 + {} x^3, {}, {}), x = L / {}; "
                 "{} aggregation, {} surrogate, first {} layers dense",
                 f.str("sink-router-config"), ec.sink_router ? "on" : "off", c.c0, c.c1, c.c2, c.c3, c.tau_min,
                 c.tau_max, c.length_ref, sink_aggregation_name(c.aggregation), sink_surrogate_name(c.surrogate),
                 c.num_dense_layers);
  }
}

void sparse_prefill_flags(const ServerFlags& f, EngineConfig& ec) {
  SparsePrefillConfig& sp = ec.sparse_prefill;
  if (f.has("sparse-prefill")) {
    const auto m = parse_sparse_prefill_method(f.str("sparse-prefill"));
    if (!m) f.usage("--sparse-prefill: unknown method '" + f.str("sparse-prefill") + "'");
    sp.method = *m;
  }
  if (f.has("sparse-prefill-config")) {
    sp.head_patterns = std::make_shared<const SparseHeadPatterns>(load_sparse_patterns(f.str("sparse-prefill-config")));
    if (!f.has("sparse-prefill")) sp.method = SparsePrefillMethod::MMInference;
  }
  sp.min_prompt_len = static_cast<int>(f.integer("sparse-prefill-min-len", sp.min_prompt_len, 0));
  if (f.has("sparse-prefill-grid-search")) {
    const std::string& v = f.str("sparse-prefill-grid-search");
    if (v != "chunk" && v != "prompt") f.usage("--sparse-prefill-grid-search must be chunk or prompt");
    sp.grid_search_once = v == "prompt";
  }
}

}  // namespace

EngineConfig engine_config(const ServerFlags& f) {
  EngineConfig ec;
  ec.block_size = static_cast<int>(f.integer("block-size", 16, 1));
  ec.num_kv_blocks = f.integer("num-kv-blocks", 0, 1);
  ec.kv_cache_memory_gib = f.positive("kv-cache-memory-gib", 1.0);
  ec.max_model_len = f.integer("max-model-len", 0, 1);
  scheduler_flags(f, ec);
  ec.enable_prefix_caching = f.boolean("enable-prefix-caching", true);
  cli::apply_backend_flags(f.all(), ServerFlags::parser(), ec);
  ec.debug_fail_step = f.integer("debug-fail-step", 0, 0);
  look_m_flags(f, ec);
  sink_router_flags(f, ec);
  sparse_prefill_flags(f, ec);
  return ec;
}

double failure_exit_delay(const ServerFlags& f) {
  return f.has("failure-exit-delay") ? ServerFlags::parser().number("failure-exit-delay", f.str("failure-exit-delay"), 0.0, 86400.0)
                                     : 2.0;
}

}  // namespace vlm::server_cli
