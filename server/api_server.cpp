#include "server/api_server.h"

#include <chrono>
#include <random>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "model/families/multimodal_input.h"
#include "server/completion_stream.h"
#include "server/http/constant_time.h"

namespace vlm {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message, int status = 400,
                      const std::string& type = "invalid_request_error") {
  throw RequestError(status, type, message, param);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(uint64_t salt) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ (salt * 0x9e3779b97f4a7c15ull));
  return fmt::format("{:016x}", rng());
}

class TokenizerTextDecoder : public TextDecoder {
 public:
  TokenizerTextDecoder(const Tokenizer& tok, bool skip, std::span<const int32_t> prompt) : d_(tok, skip, prompt) {}
  std::string push(int32_t id) override { return d_.push(id); }
  std::string flush() override { return d_.flush(); }

 private:
  IncrementalDetokenizer d_;
};

class TokenizerTextDecoderFactory : public TextDecoderFactory {
 public:
  explicit TokenizerTextDecoderFactory(std::shared_ptr<const Tokenizer> t) : tok_(std::move(t)) {}
  std::unique_ptr<TextDecoder> make(std::span<const int32_t> prompt_ids, bool skip_special) const override {
    return std::make_unique<TokenizerTextDecoder>(*tok_, skip_special, prompt_ids);
  }

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

}  // namespace

std::shared_ptr<const TextDecoderFactory> make_text_decoder_factory(std::shared_ptr<const Tokenizer> tokenizer) {
  if (!tokenizer) return nullptr;
  return std::make_shared<TokenizerTextDecoderFactory>(std::move(tokenizer));
}

ApiServer::ApiServer(ApiServerOptions options, EngineLoop& engine, std::shared_ptr<const Tokenizer> tokenizer,
                     std::optional<ChatTemplate> chat_template, SamplingDefaults defaults)
    : options_(std::move(options)), engine_(engine), tokenizer_(std::move(tokenizer)),
      chat_template_(std::move(chat_template)), defaults_(defaults) {
  if (tokenizer_) {
    std::vector<int32_t> eos;
    if (tokenizer_->eos_id()) eos.push_back(*tokenizer_->eos_id());
    constraints_ = std::make_unique<structured::ConstraintCache>(structured::vocabulary_of(*tokenizer_, eos));
  }
  if (chat_template_) tool_format_ = tool_call_format(chat_template_->source());
  media_cache_ = std::make_unique<ProcessedMediaCache>(options_.mm_processor_cache_bytes);
  if (options_.images)
    image_loader_.emplace(options_.media, options_.image_limits, options_.images->preprocess);
  if (options_.qwen2vl)
    media_loader_ = std::make_unique<Qwen2VLMediaLoader>(options_.media, options_.image_limits, *options_.qwen2vl);
  else if (options_.qwen3vl)
    media_loader_ = std::make_unique<Qwen3VLMediaLoader>(options_.media, options_.image_limits, *options_.qwen3vl);
  else if (options_.onevision)
    media_loader_ = std::make_unique<OnevisionMediaLoader>(options_.media, options_.image_limits, *options_.onevision);
  if (chat_template_) chat_messages_ = chat_messages_options();
  if (options_.media_workers > 0 && (media_loader_ || image_loader_))
    media_workers_ = std::make_unique<MediaWorkers>(options_.media_workers, std::max(0, options_.media_queue));
  using T = MetricsRegistry::Type;
  auto& m = metrics_;
  m.declare("vlm:media_jobs_running", T::Gauge, "Requests with media being handled on the media workers.");
  m.declare("vlm:media_jobs_waiting", T::Gauge, "Requests with media waiting for a media worker.");
  m.declare("vlm:media_jobs_rejected_total", T::Counter,
            "Requests with media answered 503 because the media workers and their queue were full.");
  m.declare("vllm:num_requests_running", T::Gauge, "Number of requests in model execution batches.");
  m.declare("vllm:num_requests_waiting", T::Gauge, "Number of requests waiting to be processed.");
  m.declare("vllm:kv_cache_usage_perc", T::Gauge, "KV-cache usage. 1 means 100 percent usage.");
  m.declare("vllm:prompt_tokens_total", T::Counter, "Number of prefill tokens processed.");
  m.declare("vllm:generation_tokens_total", T::Counter, "Number of generation tokens processed.");
  m.declare("vllm:num_preemptions_total", T::Counter, "Cumulative number of preemptions from the engine.");
  m.declare("vllm:request_success_total", T::Counter, "Count of successfully processed requests.");
  m.declare("vllm:prefix_cache_queries_total", T::Counter,
            "Prefix cache queries, in terms of number of queried tokens.");
  m.declare("vllm:prefix_cache_hits_total", T::Counter, "Prefix cache hits, in terms of number of cached tokens.");
  m.declare("vlm:prefix_cache_blocks", T::Gauge, "KV blocks holding a cached prefix (in use or evictable).");
  m.declare("vlm:media_items_encoded_total", T::Counter, "Media items (images, videos) run through the encoder.");
  m.declare("vlm:mm_processor_cache_queries_total", T::Counter, "Images looked up in the processed media cache.");
  m.declare("vlm:mm_processor_cache_hits_total", T::Counter,
            "Images found in the processed media cache (neither decoded nor preprocessed again).");
  m.declare("vlm:mm_processor_cache_bytes", T::Gauge, "Pixel bytes the processed media cache holds.");
  // The seed methods (ours, not vLLM's).
  m.declare("vlm:sink_router_groups_routed_total", T::Counter, "SinkRouter decode decisions (token, layer, kv group).");
  m.declare("vlm:sink_router_groups_skipped_total", T::Counter, "SinkRouter groups skipped (KV not read).");
  m.declare("vlm:sink_router_kv_bytes_skipped_total", T::Counter, "KV cache bytes SinkRouter did not read.");
  m.declare("vlm:look_m_compressions_total", T::Counter, "Sequences whose KV cache LOOK-M compressed.");
  m.declare("vlm:look_m_kv_blocks_freed_total", T::Counter, "KV blocks LOOK-M freed.");
  m.declare("vlm:look_m_kv_bytes_saved_total", T::Counter, "KV cache bytes LOOK-M returned to the pool.");
  m.declare("vllm:time_to_first_token_seconds", T::Histogram, "Histogram of time to first token in seconds.",
            MetricsRegistry::latency_buckets());
  m.declare("vllm:inter_token_latency_seconds", T::Histogram, "Histogram of inter-token latency in seconds.",
            MetricsRegistry::token_latency_buckets());
  m.declare("vllm:e2e_request_latency_seconds", T::Histogram, "Histogram of e2e request latency in seconds.",
            MetricsRegistry::latency_buckets());
  m.declare("vllm:request_prompt_tokens", T::Histogram, "Number of prefill tokens processed.",
            {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000});
  m.declare("vllm:request_generation_tokens", T::Histogram, "Number of generation tokens processed.",
            {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000});
  m.declare("vlm:prefill_attention_density", T::Histogram,
            "Computed / causal key blocks of a request's sparse-prefilled prompt (dense prompts not observed).",
            {0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0});
}

void ApiServer::register_routes(Router& router) {
  router.add("POST", "/v1/chat/completions", [this](const HttpRequest& r) { return chat_offloaded(r); });
  router.add("POST", "/v1/completions", [this](const HttpRequest& r) { return completions(r); });
  router.add("GET", "/v1/models", [this](const HttpRequest& r) { return models(r); });
  router.add("GET", "/health", [this](const HttpRequest& r) { return health(r); });
  router.add("POST", "/tokenize", [this](const HttpRequest& r) { return tokenize(r); });
  router.add("POST", "/detokenize", [this](const HttpRequest& r) { return detokenize(r); });
  router.add("GET", "/metrics", [this](const HttpRequest& r) { return metrics_text(r); });
  router.add("POST", "/reset_prefix_cache", [this](const HttpRequest& r) { return reset_prefix_cache(r); });
  router.add("GET", "/version", [](const HttpRequest&) { return HttpReply::json(200, R"({"version":"0.1.0"})"); });
}

void ApiServer::register_loading_routes(Router& router) {
  router.set_fallback([](const HttpRequest&) {
    HttpReply r = HttpReply::error(503, "unavailable_error", "model is loading");
    r.headers.emplace_back("Retry-After", kUnavailableRetryAfter);
    return r;
  });
}

ChatMessagesOptions ApiServer::chat_messages_options() const {
  ChatMessagesOptions o;
  const ChatContentFormat detected = chat_template_->content_format();
  o.format = options_.chat_content_format.value_or(detected);
  o.developer_role = chat_template_->supports_developer_role();
  VLM_LOG_INFO("chat template content format: {} ({})", chat_content_format_name(o.format),
               options_.chat_content_format ? fmt::format("set; the template reads {}", chat_content_format_name(detected))
                                            : std::string("detected"));
  // String-format templates get media parts as the model's placeholder text (vLLM's
  // get_placeholder_str): the image / video token, Qwen2-VL's inside its vision markers.
  if (!tokenizer_) return o;
  std::optional<int32_t> image_id, video_id;
  if (options_.images) image_id = options_.images->image_token_id;
  if (media_loader_) {
    image_id = media_loader_->image_token_id();
    if (media_loader_->accepts_video()) video_id = media_loader_->video_token_id();
  }
  auto placeholder = [&](int32_t id) {
    const std::string t = tokenizer_->id_to_token(id);
    return options_.qwen2vl || options_.qwen3vl ? "<|vision_start|>" + t + "<|vision_end|>" : t;
  };
  if (image_id) o.image_placeholder = placeholder(*image_id);
  if (video_id) o.video_placeholder = placeholder(*video_id);
  return o;
}

void ApiServer::admit(const HttpRequest& req, const std::string& model, bool json_body) const {
  if (!options_.api_key.empty() && !constant_time_equals(req.header("authorization"), "Bearer " + options_.api_key))
    bad("", "invalid or missing API key", 401, "authentication_error");
  if (!ready_ || draining_) bad("", draining_ ? "server is shutting down" : "model is loading", 503, "unavailable_error");
  if (engine_.failed()) bad("", "the engine failed and the server is restarting", 503, "unavailable_error");
  if (req.method == "POST" && json_body) {
    const std::string& ct = req.header("content-type");
    if (ct.rfind("application/json", 0) != 0)
      bad("", "Content-Type must be application/json, got '" + ct + "'", 415);
  }
  if (!model.empty() && model != options_.served_model_name)
    bad("model", "The model '" + model + "' does not exist.", 404, "not_found_error");
}

void ApiServer::compile_constraint(ApiRequest& r) {
  if (!r.constraint) return;
  if (!constraints_) bad(r.constraint_param, "structured output needs a tokenizer, and the model directory has no tokenizer.json");
  try {
    r.params.constraint = constraints_->get(*r.constraint);
  } catch (const std::invalid_argument& e) {
    bad(r.constraint_param, e.what());
  }
}

HttpReply ApiServer::chat(const HttpRequest& req) {
  RequestTimeline tl;
  ApiRequest r = parse_api_request(ApiKind::Chat, req.body, defaults_);
  admit(req, r.model);
  compile_constraint(r);
  tl.parse_ms = tl.lap();
  std::vector<PromptInput> prompts;
  prompts.push_back(render_chat(r, /*load_images=*/true, &tl));
  return respond(r, std::move(prompts), {}, "chatcmpl-", tl);
}

HttpReply ApiServer::chat_offloaded(const HttpRequest& req) {
  if (!media_workers_) return chat(req);
  const std::string& b = req.body;
  const bool media = b.find("image_url") != std::string::npos || b.find("video_url") != std::string::npos ||
                     b.find("\"image\"") != std::string::npos || b.find("\"video\"") != std::string::npos;
  if (!media) return chat(req);
  std::shared_ptr<DeferredReply> job = media_workers_->try_submit([this, req] { return chat(req); });
  if (!job) {
    HttpReply r = HttpReply::error(
        503, "unavailable_error",
        fmt::format("the media workers are busy ({} running, {} waiting); retry later (--media-workers, --media-queue)",
                    options_.media_workers, options_.media_queue));
    r.headers.emplace_back("Retry-After", kUnavailableRetryAfter);
    return r;
  }
  HttpReply r;
  r.deferred = std::move(job);
  return r;
}

HttpReply ApiServer::completions(const HttpRequest& req) {
  RequestTimeline tl;
  ApiRequest r = parse_api_request(ApiKind::Completion, req.body, defaults_);
  admit(req, r.model);
  compile_constraint(r);
  tl.parse_ms = tl.lap();
  std::vector<PromptInput> prompts;
  std::vector<std::string> echo;
  for (const auto& p : r.prompts) {
    if (p.text) prompts.push_back({need_tokenizer("a text prompt").encode(*p.text, true), {}, {}});
    else prompts.push_back({p.ids, {}, {}});
    if (r.echo) echo.push_back(p.text ? *p.text : (tokenizer_ ? tokenizer_->decode(p.ids) : ""));
  }
  tl.tokenize_ms = tl.lap();
  return respond(r, std::move(prompts), std::move(echo), "cmpl-", tl);
}

HttpReply ApiServer::respond(const ApiRequest& r, std::vector<PromptInput> prompts,
                             std::vector<std::string> echo_prefix, const std::string& id_prefix,
                             RequestTimeline tl) {
  ResponseMeta meta;
  meta.kind = r.kind;
  meta.id = id_prefix + random_hex(next_id_++);
  meta.created = unix_now();
  meta.model = options_.served_model_name;
  meta.n = r.params.n;
  meta.include_usage = r.include_usage;
  meta.chat_logprobs = r.chat_logprobs;
  meta.return_token_ids = r.return_token_ids;
  meta.echo_prefix = std::move(echo_prefix);
  meta.tools = r.tools;
  meta.tool_format = tool_format_;
  if (tokenizer_) {
    auto tok = tokenizer_;
    meta.token_text = [tok](int32_t id) { return tok->decode(std::span<const int32_t>(&id, 1)); };
  }
  int64_t num_prompt_tokens = 0;
  std::vector<RequestHandle> handles;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].ids.empty()) bad("prompt", "the prompt is empty after tokenization");
    num_prompt_tokens += static_cast<int64_t>(prompts[p].ids.size());  // image tokens included (vLLM)
    GenerationRequest g;
    g.id = meta.id;
    if (prompts.size() > 1) g.id += fmt::format("-{}", p);
    g.prompt_ids = std::move(prompts[p].ids);
    g.prompt_modalities = std::move(prompts[p].modalities);
    g.images = std::move(prompts[p].images);
    g.media_keys = std::move(prompts[p].media_keys);
    g.params = r.params;
    g.look_m = r.look_m;
    g.cache_salt = r.cache_salt;
    try {
      handles.push_back(engine_.submit(std::move(g)));
    } catch (const RequestError& e) {
      if (e.status() == 429) {
        HttpReply reply = HttpReply::error(429, "rate_limit_exceeded", e.what());
        reply.headers.emplace_back("Retry-After", "1");
        return reply;  // handles already made are dropped: their requests are cancelled
      }
      throw;
    }
  }
  tl.submit_ms = tl.lap();
  const auto arrival = meta.arrival;
  OutcomeHook hook = [this, arrival, num_prompt_tokens, tl, id = meta.id](const CompletionOutcome& o) {
    record_outcome(o, std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count(), num_prompt_tokens);
    if (o.ttft_s >= 0 && spdlog::should_log(spdlog::level::debug)) {
      const double first_ms = o.ttft_s * 1e3 - std::chrono::duration<double, std::milli>(tl.last - arrival).count();
      VLM_LOG_DEBUG("request {}: {} prompt tokens ({} cached): parse {:.2f} template {:.2f} tokenize {:.2f} "
                    "media {:.2f} submit {:.2f} ms, then first token {:.2f} ms later",
                    id, num_prompt_tokens, o.usage.cached_tokens, tl.parse_ms, tl.template_ms, tl.tokenize_ms,
                    tl.media_ms, tl.submit_ms, first_ms);
    }
  };
  if (r.stream) {
    HttpReply reply;
    reply.content_type = "text/event-stream; charset=utf-8";  // as OpenAI sends it
    reply.stream = CompletionStream::create(std::move(meta), std::move(handles), std::move(hook));
    reply.heartbeat = ": ping\n\n";
    return reply;
  }
  HttpReply reply;
  reply.deferred = std::make_shared<CompletionCollector>(std::move(meta), std::move(handles), std::move(hook));
  return reply;
}

void ApiServer::record_outcome(const CompletionOutcome& o, double e2e_s, int64_t num_prompt_tokens) {
  const Labels model{{"model_name", options_.served_model_name}};
  if (o.error) {
    VLM_LOG_INFO("request failed: {} {}", o.error->status, o.error->message);
    return;
  }
  for (const auto& reason : o.finish_reasons)
    if (!reason.empty())
      metrics_.inc("vllm:request_success_total", {{"model_name", options_.served_model_name}, {"finished_reason", reason}});
  if (o.ttft_s >= 0) metrics_.observe("vllm:time_to_first_token_seconds", o.ttft_s, model);
  for (double g : o.itl_s) metrics_.observe("vllm:inter_token_latency_seconds", g, model);
  metrics_.observe("vllm:e2e_request_latency_seconds", e2e_s, model);
  metrics_.observe("vllm:request_prompt_tokens", static_cast<double>(num_prompt_tokens), model);
  metrics_.observe("vllm:request_generation_tokens", static_cast<double>(o.usage.completion_tokens), model);
  if (o.usage.prefill_blocks_causal > 0)
    metrics_.observe("vlm:prefill_attention_density", o.usage.prefill_blocks_computed / o.usage.prefill_blocks_causal,
                     model);
}

HttpReply ApiServer::models(const HttpRequest& req) const {
  if (!options_.api_key.empty() && !constant_time_equals(req.header("authorization"), "Bearer " + options_.api_key))
    return HttpReply::error(401, "authentication_error", "invalid or missing API key");
  json m = {{"id", options_.served_model_name}, {"object", "model"}, {"created", unix_now()},
            {"owned_by", "vlm-server"}, {"root", options_.model_root}, {"parent", nullptr},
            {"max_model_len", engine_.engine().max_model_len()}};
  return HttpReply::json(200, json{{"object", "list"}, {"data", json::array({m})}}.dump());
}

HttpReply ApiServer::health(const HttpRequest&) const {
  if (engine_.failed()) {  // the process exits soon (tools/vlm-server): an orchestrator restarts it
    HttpReply r = HttpReply::error(503, "unavailable_error", "the engine failed: " + engine_.failure());
    r.headers.emplace_back("Retry-After", kUnavailableRetryAfter);
    return r;
  }
  if (!ready_ || draining_) {
    HttpReply r = HttpReply::error(503, "unavailable_error", draining_ ? "server is shutting down" : "model is loading");
    r.headers.emplace_back("Retry-After", kUnavailableRetryAfter);
    return r;
  }
  return HttpReply::json(200, R"({"status":"ok"})");
}

HttpReply ApiServer::tokenize(const HttpRequest& req) const {
  json j = parse_json_object(req.body);
  const Tokenizer& tok = need_tokenizer("/tokenize");
  std::vector<int32_t> ids;
  if (j.contains("messages")) {
    ApiRequest r = parse_api_request(ApiKind::Chat, req.body, defaults_);
    ids = render_chat(r, /*load_images=*/false).ids;  // placeholders expanded, images not fetched
  } else {
    if (!j.contains("prompt") || !j["prompt"].is_string()) bad("prompt", "'prompt' must be a string");
    bool add_special = true;
    if (j.contains("add_special_tokens")) {
      if (!j["add_special_tokens"].is_boolean()) bad("add_special_tokens", "'add_special_tokens' must be a boolean");
      add_special = j["add_special_tokens"].get<bool>();
    }
    ids = tok.encode(j["prompt"].get<std::string>(), add_special);
  }
  return HttpReply::json(200, json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.engine().max_model_len()}}.dump());
}

HttpReply ApiServer::detokenize(const HttpRequest& req) const {
  json j = parse_json_object(req.body);
  const Tokenizer& tok = need_tokenizer("/detokenize");
  if (!j.contains("tokens") || !j["tokens"].is_array()) bad("tokens", "'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab_size())
      bad("tokens", "'tokens' must hold token ids in [0, " + std::to_string(tok.vocab_size()) + ")");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return HttpReply::json(200, json{{"prompt", tok.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

HttpReply ApiServer::reset_prefix_cache(const HttpRequest& req) {
  admit(req, "", /*json_body=*/false);
  engine_.reset_prefix_cache();  // done by the engine thread before its next step
  return HttpReply::text(200, "", "text/plain; charset=utf-8");
}

HttpReply ApiServer::metrics_text(const HttpRequest&) {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  const EngineStats s = engine_.stats();
  const Labels model{{"model_name", options_.served_model_name}};
  metrics_.set("vllm:num_requests_running", s.num_running_seqs, model);
  metrics_.set("vllm:num_requests_waiting", s.num_waiting_seqs, model);
  metrics_.set("vllm:kv_cache_usage_perc", s.kv_usage, model);
  if (media_workers_) {
    metrics_.set("vlm:media_jobs_running", media_workers_->running(), model);
    metrics_.set("vlm:media_jobs_waiting", media_workers_->waiting(), model);
  }
  // vLLM's counters have a sample from the first scrape on, 0 until they move (as vLLM exports
  // them: a dashboard's rate() needs the series before the first event, e.g. the prefix-cache
  // counters with caching off). Ours (vlm:*) appear with their first event.
  auto counter_to = [&](const char* name, double total) {
    const double cur = metrics_.value(name, model);
    if (total > cur || std::string_view(name).starts_with("vllm:"))
      metrics_.inc(name, model, total > cur ? total - cur : 0.0);
  };
  counter_to("vllm:prompt_tokens_total", static_cast<double>(s.num_prompt_tokens));
  counter_to("vllm:generation_tokens_total", static_cast<double>(s.num_generation_tokens));
  counter_to("vllm:num_preemptions_total", static_cast<double>(s.num_preemptions));
  counter_to("vllm:prefix_cache_queries_total", static_cast<double>(s.prefix_cache_queries));
  counter_to("vllm:prefix_cache_hits_total", static_cast<double>(s.prefix_cache_hits));
  counter_to("vlm:media_items_encoded_total", static_cast<double>(s.num_media_items_encoded));
  if (media_workers_) counter_to("vlm:media_jobs_rejected_total", static_cast<double>(media_workers_->rejected()));
  metrics_.set("vlm:prefix_cache_blocks", static_cast<double>(s.num_cached_kv_blocks), model);
  const ProcessedMediaCache::Stats mc = media_cache_->stats();
  counter_to("vlm:mm_processor_cache_queries_total", static_cast<double>(mc.hits + mc.misses));
  counter_to("vlm:mm_processor_cache_hits_total", static_cast<double>(mc.hits));
  if (media_cache_->enabled()) metrics_.set("vlm:mm_processor_cache_bytes", static_cast<double>(mc.bytes), model);
  counter_to("vlm:sink_router_groups_routed_total", static_cast<double>(s.sink_groups_routed));
  counter_to("vlm:sink_router_groups_skipped_total", static_cast<double>(s.sink_groups_skipped));
  counter_to("vlm:sink_router_kv_bytes_skipped_total", static_cast<double>(s.sink_kv_bytes_skipped));
  counter_to("vlm:look_m_compressions_total", static_cast<double>(s.num_look_m_compressions));
  counter_to("vlm:look_m_kv_blocks_freed_total", static_cast<double>(s.look_m_kv_blocks_freed));
  counter_to("vlm:look_m_kv_bytes_saved_total", static_cast<double>(s.look_m_kv_bytes_freed));
  return HttpReply::text(200, metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace vlm
