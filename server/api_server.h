// ApiServer: the OpenAI-style endpoints over an EngineLoop, registered on a Router.
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
//   POST /tokenize, POST /detokenize, GET /metrics, GET /version.
// Handlers parse JSON into native requests (server/openai_request), tokenize (chat template
// first for chat), submit to the engine, and answer with a CompletionStream (stream: true) or a
// CompletionCollector (a deferred whole response). Errors use the OpenAI envelope.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine_loop.h"
#include "model/chat_template.h"
#include "model/incremental_detokenizer.h"
#include "model/tokenizer.h"
#include "server/media_fetch.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/router.h"

namespace vlm {

struct ApiServerOptions {
  std::string served_model_name;  // the id clients send as "model"
  std::string model_root;         // the checkpoint directory (reported as "root")
  std::string api_key;            // "" = no authentication
  MediaFetchOptions media;
  int heartbeat_ms = 5000;
};

class ApiServer {
 public:
  // tokenizer / chat_template may be null: text prompts and chat are then refused with a 400.
  ApiServer(ApiServerOptions options, EngineLoop& engine, std::shared_ptr<const Tokenizer> tokenizer,
            std::optional<ChatTemplate> chat_template, SamplingDefaults defaults);

  void register_routes(Router& router);
  void set_ready(bool ready) { ready_ = ready; }
  void set_draining(bool draining) { draining_ = draining; }
  MetricsRegistry& metrics() { return metrics_; }

 private:
  HttpReply chat(const HttpRequest& req);
  HttpReply completions(const HttpRequest& req);
  HttpReply models(const HttpRequest& req) const;
  HttpReply health(const HttpRequest& req) const;
  HttpReply tokenize(const HttpRequest& req) const;
  HttpReply detokenize(const HttpRequest& req) const;
  HttpReply metrics_text(const HttpRequest& req);

  // 401 / 503 / 415 / 404 checks shared by the generation endpoints; throws RequestError.
  void admit(const HttpRequest& req, const std::string& model) const;
  const Tokenizer& need_tokenizer(const std::string& what) const;
  std::vector<int32_t> render_chat(const ApiRequest& r) const;
  HttpReply respond(const ApiRequest& r, std::vector<std::vector<int32_t>> prompts,
                    std::vector<std::string> echo_prefix, const std::string& id_prefix);
  void record_outcome(const struct CompletionOutcome& o, double e2e_s, int64_t num_prompt_tokens);

  ApiServerOptions options_;
  EngineLoop& engine_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  SamplingDefaults defaults_;
  MetricsRegistry metrics_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{0};
};

// The tokenizer as the engine's text decoder factory (incremental detokenization).
std::shared_ptr<const TextDecoderFactory> make_text_decoder_factory(std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace vlm
