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
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "engine/engine_loop.h"
#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "kernels/core/thread_pool.h"
#include "server/api_server.h"
#include "server/http/http_server.h"
#include "server/webui/web_ui.h"
#include "tools/common/backend_flags.h"
#include "tools/common/cli_flags.h"
#include "tools/vlm-server/served_model.h"
#include "tools/vlm-server/server_flags.h"

namespace {

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
  using vlm::server_cli::ServerFlags;
  const ServerFlags flags = ServerFlags::parse(argc, argv);
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
    vlm::set_log_level(flags.str("log-level", "info"));
    if (flags.has("threads")) vlm::set_num_threads(static_cast<int>(flags.integer("threads", 1, 1)));
    const std::string model_dir = flags.str("model");
    vlm::ApiServerOptions api = vlm::server_cli::api_options(flags);
    vlm::HttpServerOptions http = vlm::server_cli::http_options(flags);
    const vlm::EngineConfig ec = vlm::server_cli::engine_config(flags);
    const vlm::server_cli::MediaFlags media = vlm::server_cli::media_flags(flags, api);
    const double failure_exit_delay = vlm::server_cli::failure_exit_delay(flags);
    vlm::Router router;
    // The HTTP side comes up first so /health answers 503 while the model loads.
    std::unique_ptr<vlm::HttpServer> server;

    vlm::Router loading_router;
    // Until the model is ready every request answers 503 with Retry-After (clients and load
    // balancers retry a 503; they give up on a 404).
    vlm::ApiServer::register_loading_routes(loading_router);
    const std::string listen_while_loading = flags.str("listen-while-loading", "on");
    if (listen_while_loading != "on" && listen_while_loading != "off") flags.usage("--listen-while-loading must be on or off");
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
    const vlm::WeightLoadOptions load = vlm::cli::load_options(flags.all(), ServerFlags::parser(), ec);  // --load-format
    std::unique_ptr<vlm::Engine> engine =
        vlm::server_cli::load_served_model(model_dir, load, ec, media, tokenizer, api);
    // An engine that failed for good (EngineLoop::failed) wakes the wait below as a signal would.
    vlm::EngineLoop loop(std::move(engine), [] {
      const unsigned char b = kEngineFailed;
      [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
    });
    vlm::ApiServer api_server(api, loop, tokenizer, std::move(chat_template), vlm::SamplingDefaults::load(model_dir));
    api_server.register_routes(router);
    if (!flags.boolean("no-webui", false)) vlm::register_web_ui(router);

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
      return exit_after_failure(flags.positive("drain-timeout", 30.0), failure_exit_delay, loop, *server);
    VLM_LOG_INFO("signal {}: draining", sig);
    api_server.set_draining(true);
    server->stop_accepting();
    const double grace = flags.positive("drain-timeout", 30.0);
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
