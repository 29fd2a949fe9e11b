// FakeOpenAiServer: an OpenAI-compatible server for vlm-bench's tests, on the project's HttpServer
// and Router (127.0.0.1, ephemeral port). It streams chunks the way vLLM does (a role chunk with
// empty content, one chunk per token, finish_reason on the last token, then the usage chunk with
// empty choices and `data: [DONE]`), serves GET /v1/models and a vLLM-style POST /tokenize (or
// llama.cpp's shape, or none), and can be told, per request, to fail with a status or to stall.
// Its tokenizer: whitespace-separated words; a word longer than five characters is two tokens;
// an image part counts kImageTokens; a prompt given as a list of ids counts its length.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http/http_server.h"
#include "server/http/router.h"

namespace vlm::testing {

struct FakeBehaviour {
  int status = 200;          // not 200: answer this error at once
  int first_token_ms = 2;    // delay before the role chunk
  int token_gap_ms = 1;      // between token chunks
  bool error_mid_stream = false;  // after two tokens, an {"error":...} event and [DONE]
};

// POST /tokenize: vLLM's {"model","prompt"} -> {"tokens","count","max_model_len"}, llama.cpp's
// {"content"} -> {"tokens"}, or no such route (404).
enum class FakeTokenize { Vllm, LlamaCpp, None };

class FakeOpenAiServer {
 public:
  static constexpr int kImageTokens = 10;
  // plan(n): how to answer the n-th completion request (0-based, in arrival order).
  explicit FakeOpenAiServer(std::function<FakeBehaviour(int)> plan = {}, FakeTokenize tokenize = FakeTokenize::Vllm);
  ~FakeOpenAiServer();

  std::string base_url() const;
  // Bodies and Authorization headers of every completion request, in arrival order.
  std::vector<std::string> bodies() const;
  std::vector<std::string> auth_headers() const;
  int completion_requests() const { return num_requests_.load(); }

  // The fake tokenizer's count for a text.
  static int count_tokens(const std::string& text);

  // Runs `fn` on the timer thread after `ms` milliseconds.
  void after(int ms, std::function<void()> fn);

 private:
  HttpReply complete(const HttpRequest& r, bool chat);

  std::function<FakeBehaviour(int)> plan_;
  Router router_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> num_requests_{0};
  mutable std::mutex mu_;
  std::vector<std::string> bodies_, auths_;
  // Timer thread.
  std::condition_variable cv_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> timers_;
  bool stopping_ = false;
  std::thread timer_thread_;
};

}  // namespace vlm::testing
