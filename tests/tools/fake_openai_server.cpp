#include "tests/tools/fake_openai_server.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace vlm::testing {
namespace {

using nlohmann::json;

// Streams prepared events, each after its delay from the previous one, via the server's timer.
class FakeStream : public ChunkStream {
 public:
  FakeStream(FakeOpenAiServer& server, std::vector<std::pair<int, std::string>> events)
      : server_(server), events_(std::move(events)) {}
  void next(std::function<void(std::optional<std::string>)> deliver) override {
    if (next_ >= events_.size()) return deliver(std::nullopt);
    auto& [delay, text] = events_[next_++];
    if (delay <= 0) return deliver(text);
    server_.after(delay, [deliver, text = text] { deliver(text); });
  }
  void cancel() override {}

 private:
  FakeOpenAiServer& server_;
  std::vector<std::pair<int, std::string>> events_;
  size_t next_ = 0;
};

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

}  // namespace

int FakeOpenAiServer::count_tokens(const std::string& text) {
  std::istringstream in(text);
  std::string w;
  int n = 0;
  while (in >> w) n += w.size() > 5 ? 2 : 1;
  return n;
}

FakeOpenAiServer::FakeOpenAiServer(std::function<FakeBehaviour(int)> plan, FakeTokenize tokenize)
    : plan_(std::move(plan)) {
  timer_thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (timers_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = timers_.begin();
      if (cv_.wait_until(lock, first->first) == std::cv_status::timeout ||
          std::chrono::steady_clock::now() >= first->first) {
        if (timers_.empty()) continue;
        auto fn = std::move(timers_.begin()->second);
        timers_.erase(timers_.begin());
        lock.unlock();
        fn();
        lock.lock();
      }
    }
  });
  router_.add("GET", "/v1/models", [](const HttpRequest&) {
    return HttpReply::json(200, R"({"object":"list","data":[{"id":"fake-model","object":"model","owned_by":"test"}]})");
  });
  if (tokenize != FakeTokenize::None) router_.add("POST", "/tokenize", [tokenize](const HttpRequest& r) {
    const json req = json::parse(r.body);
    const char* field = tokenize == FakeTokenize::Vllm ? "prompt" : "content";
    if (!req.contains(field)) return HttpReply::error(400, "invalid_request_error", std::string("no '") + field + "'");
    json tokens = json::array();
    std::istringstream in(req.at(field).get<std::string>());
    std::string w;
    while (in >> w) {
      const int id = static_cast<int>(std::hash<std::string>()(w) % 1000) + 5;
      tokens.push_back(id);
      if (w.size() > 5) tokens.push_back(id + 1000);
    }
    if (tokenize == FakeTokenize::LlamaCpp) return HttpReply::json(200, json{{"tokens", tokens}}.dump());
    return HttpReply::json(200, json{{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", 4096}}.dump());
  });
  router_.add("POST", "/v1/chat/completions", [this](const HttpRequest& r) { return complete(r, true); });
  router_.add("POST", "/v1/completions", [this](const HttpRequest& r) { return complete(r, false); });
  HttpServerOptions o;
  o.port = 0;
  o.num_threads = 2;
  o.max_body_bytes = 64u << 20;
  o.heartbeat_ms = 60000;
  server_ = std::make_unique<HttpServer>(o, router_);
  server_->start();
}

FakeOpenAiServer::~FakeOpenAiServer() {
  server_->stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  timer_thread_.join();
}

std::string FakeOpenAiServer::base_url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

std::vector<std::string> FakeOpenAiServer::bodies() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bodies_;
}

std::vector<std::string> FakeOpenAiServer::auth_headers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return auths_;
}

void FakeOpenAiServer::after(int ms, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timers_.emplace(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms), std::move(fn));
  }
  cv_.notify_all();
}

HttpReply FakeOpenAiServer::complete(const HttpRequest& r, bool chat) {
  const int n = num_requests_++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bodies_.push_back(r.body);
    auths_.push_back(r.header("authorization"));
  }
  const FakeBehaviour b = plan_ ? plan_(n) : FakeBehaviour{};
  if (b.status == 429) {
    HttpReply e = HttpReply::error(429, "rate_limit_error", "queue full");
    e.headers.emplace_back("Retry-After", "1");
    return e;
  }
  if (b.status != 200) return HttpReply::error(b.status, "server_error", "injected failure " + std::to_string(n));

  const json req = json::parse(r.body);
  int prompt_tokens = 0;
  if (chat) {
    for (const json& m : req.at("messages")) {
      const json& c = m.at("content");
      if (c.is_string()) prompt_tokens += count_tokens(c.get<std::string>());
      else
        for (const json& part : c) {
          if (part.value("type", "") == "text") prompt_tokens += count_tokens(part.value("text", ""));
          if (part.value("type", "") == "image_url") prompt_tokens += kImageTokens;
        }
    }
  } else {
    const json& p = req.at("prompt");
    prompt_tokens = p.is_array() ? static_cast<int>(p.size()) : count_tokens(p.get<std::string>());
  }
  const int max_tokens = req.value("max_tokens", 16);
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(n);
  const std::string object = chat ? "chat.completion.chunk" : "text_completion";
  auto chunk = [&](const json& choice) {
    return json{{"id", id}, {"object", object}, {"created", 1}, {"model", "fake-model"}, {"choices", json::array({choice})}};
  };
  const json usage = {{"prompt_tokens", prompt_tokens}, {"completion_tokens", max_tokens},
                      {"total_tokens", prompt_tokens + max_tokens}};

  if (!req.value("stream", false)) {
    std::string text;
    for (int i = 0; i < max_tokens; ++i) text += "tok" + std::to_string(i) + " ";
    json choice = chat ? json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"finish_reason", "length"}}
                       : json{{"index", 0}, {"text", text}, {"finish_reason", "length"}};
    json body = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", 1},
                 {"model", "fake-model"}, {"choices", json::array({choice})}, {"usage", usage}};
    HttpReply reply = HttpReply::json(200, body.dump());
    return reply;  // (delay not modelled for non-streaming replies)
  }
  std::vector<std::pair<int, std::string>> events;
  if (chat)
    events.emplace_back(b.first_token_ms,
                        sse(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}})));
  for (int i = 0; i < max_tokens; ++i) {
    const std::string text = "tok" + std::to_string(i) + " ";
    const json finish = i + 1 == max_tokens ? json("length") : json(nullptr);
    const json choice = chat ? json{{"index", 0}, {"delta", {{"content", text}}}, {"logprobs", nullptr}, {"finish_reason", finish}}
                             : json{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
    const int delay = (i == 0 && !chat) ? b.first_token_ms : b.token_gap_ms;
    events.emplace_back(delay, sse(chunk(choice)));
    if (b.error_mid_stream && i == 1) {
      events.emplace_back(0, sse(json{{"error", {{"message", "engine died"}, {"type", "server_error"}, {"code", 500}}}}));
      events.emplace_back(0, "data: [DONE]\n\n");
      HttpReply reply;
      reply.content_type = "text/event-stream";
      reply.stream = std::make_shared<FakeStream>(*this, std::move(events));
      return reply;
    }
  }
  json usage_chunk = {{"id", id}, {"object", object}, {"created", 1}, {"model", "fake-model"},
                      {"choices", json::array()}, {"usage", usage}};
  events.emplace_back(0, sse(usage_chunk));
  events.emplace_back(0, "data: [DONE]\n\n");
  HttpReply reply;
  reply.content_type = "text/event-stream";
  reply.stream = std::make_shared<FakeStream>(*this, std::move(events));
  return reply;
}

}  // namespace vlm::testing
