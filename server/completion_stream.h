// Turns a request's engine events into OpenAI responses: server-sent chat.completion.chunk /
// text_completion events (CompletionStream), or one JSON body when the request is done
// (CompletionCollector). One or several engine requests (a completions call with several
// prompts) make one response; choice i of prompt p is index p * n + i.
//
// Streaming follows shared/SERVING.md b.2: a role chunk per choice only when its first output
// exists, content deltas, a finishing chunk per choice, the usage chunk (choices: []) when
// asked for, then `data: [DONE]`; an error mid-stream is `data: {"error": ...}` then [DONE].
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request_channel.h"
#include "server/http/http_types.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace vlm {

struct ResponseMeta {
  ApiKind kind = ApiKind::Chat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  int n = 1;
  bool include_usage = false;
  bool chat_logprobs = false;
  bool return_token_ids = false;
  std::vector<std::string> echo_prefix;  // completions with echo: the prompt text per prompt
  std::function<std::string(int32_t)> token_text;  // a token's text, for logprobs
  ToolSettings tools;                              // chat with tools: replies parsed into tool_calls
  ToolCallFormat tool_format = ToolCallFormat::Hermes;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

// Times output events as they are read: TTFT and inter-token gaps for the metrics.
struct TokenClock {
  std::chrono::steady_clock::time_point last{};
  double ttft_s = -1;
  std::vector<double> itl_s;
  void tick(const ResponseMeta& meta);
};

// Called once with the final usage and per-choice outcome, for metrics and access logs.
struct CompletionOutcome {
  Usage usage;
  double ttft_s = -1;          // arrival -> first output token (when there was one)
  std::vector<double> itl_s;   // gaps between later output events
  std::vector<std::string> finish_reasons;  // per choice
  std::optional<RequestFailure> error;
};
using OutcomeHook = std::function<void(const CompletionOutcome&)>;

class CompletionStream : public ChunkStream, public std::enable_shared_from_this<CompletionStream> {
 public:
  // Use create(): the engine's notifications hold only a weak reference.
  static std::shared_ptr<CompletionStream> create(ResponseMeta meta, std::vector<RequestHandle> handles,
                                                  OutcomeHook hook = {});
  CompletionStream(ResponseMeta meta, std::vector<RequestHandle> handles, OutcomeHook hook);
  ~CompletionStream() override;
  void next(std::function<void(std::optional<std::string>)> deliver) override;
  void cancel() override;

 private:
  void pump();                       // delivers to a waiting reader if there is output
  std::string drain_locked();        // formats every queued event
  std::string event_chunks(const RequestEvent& e, int prompt);
  // The delta of a chat choice with tools: content held back by its ToolCallStreamer, the
  // calls at the end; sets `finish` to "tool_calls" when calls were made (not for a named one).
  nlohmann::json tool_delta(int index, const RequestEvent& e, std::string& finish);

  std::mutex mu_;
  ResponseMeta meta_;
  std::vector<RequestHandle> handles_;
  std::vector<bool> started_;        // role chunk sent, per choice
  std::vector<bool> started_tool_;   // named tool: the call's first chunk sent, per choice
  std::vector<bool> finished_;       // per handle
  std::vector<std::string> finish_reasons_;
  std::vector<std::unique_ptr<ToolCallStreamer>> tool_streams_;  // per choice, when tools are active
  Usage usage_;
  bool ended_ = false;               // [DONE] produced
  bool error_ = false;
  std::optional<RequestFailure> failure_;
  TokenClock clock_;
  std::function<void(std::optional<std::string>)> waiting_;
  OutcomeHook hook_;
};

class CompletionCollector : public DeferredReply, public std::enable_shared_from_this<CompletionCollector> {
 public:
  CompletionCollector(ResponseMeta meta, std::vector<RequestHandle> handles, OutcomeHook hook = {});
  void wait(std::function<void(HttpReply)> deliver) override;
  void cancel() override;

 private:
  void pump();
  HttpReply build() const;

  struct Choice {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprobs> logprobs;
    std::string finish_reason;
    nlohmann::json stop_reason;
  };
  std::mutex mu_;
  ResponseMeta meta_;
  std::vector<RequestHandle> handles_;
  std::vector<bool> finished_;
  std::vector<Choice> choices_;
  Usage usage_;
  std::optional<RequestFailure> failure_;
  TokenClock clock_;
  std::function<void(HttpReply)> deliver_;
  bool delivered_ = false;
  OutcomeHook hook_;
};

// JSON pieces shared by both.
// usage_json adds "vlm": {"look_m_kv_tokens_before", "look_m_kv_tokens_kept"} when LOOK-M
// compressed a prompt of the response (summed over its prompts), and {"sink_groups_routed",
// "sink_groups_skipped", "sink_groups_skipped_ratio"} when SinkRouter routed its decode steps, and
// "prefill_attention_density" (computed / causal key blocks over the sparse-prefilled chunks,
// all layers and heads) when a prompt ran sparse prefill; absent when every prompt ran dense.
nlohmann::json usage_json(const Usage& u);
// Adds one engine request's usage into a response's total.
void add_usage(Usage& into, const Usage& u);
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprobs>& lps, const ResponseMeta& meta);
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprobs>& lps, const ResponseMeta& meta,
                                        size_t text_offset);
nlohmann::json error_json(const RequestFailure& f);

}  // namespace vlm
