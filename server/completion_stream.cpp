#include "server/completion_stream.h"

#include "engine/scheduling/sequence.h"

namespace vlm {

using nlohmann::json;

namespace {

json stop_reason_json(const RequestEvent& e) {
  if (e.stop_string) return *e.stop_string;
  if (e.stop_token_id) return *e.stop_token_id;
  return nullptr;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

const char* object_name(ApiKind k, bool chunk) {
  if (k == ApiKind::Chat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

}  // namespace

void TokenClock::tick(const ResponseMeta& meta) {
  const auto now = std::chrono::steady_clock::now();
  if (ttft_s < 0) ttft_s = std::chrono::duration<double>(now - meta.arrival).count();
  else itl_s.push_back(std::chrono::duration<double>(now - last).count());
  last = now;
}

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.total_tokens()},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  json vlm = json::object();
  if (u.look_m_kv_tokens_before > 0) {
    vlm["look_m_kv_tokens_before"] = u.look_m_kv_tokens_before;
    vlm["look_m_kv_tokens_kept"] = u.look_m_kv_tokens_kept;
  }
  if (u.sink_groups_routed > 0) {
    vlm["sink_groups_routed"] = u.sink_groups_routed;
    vlm["sink_groups_skipped"] = u.sink_groups_skipped;
    vlm["sink_groups_skipped_ratio"] = static_cast<double>(u.sink_groups_skipped) / u.sink_groups_routed;
  }
  if (u.prefill_blocks_causal > 0)
    vlm["prefill_attention_density"] = u.prefill_blocks_computed / u.prefill_blocks_causal;
  if (!vlm.empty()) j["vlm"] = std::move(vlm);
  return j;
}

void add_usage(Usage& into, const Usage& u) {
  into.prompt_tokens += u.prompt_tokens;
  into.completion_tokens += u.completion_tokens;
  into.cached_tokens += u.cached_tokens;
  into.look_m_kv_tokens_before += u.look_m_kv_tokens_before;
  into.look_m_kv_tokens_kept += u.look_m_kv_tokens_kept;
  into.sink_groups_routed += u.sink_groups_routed;
  into.sink_groups_skipped += u.sink_groups_skipped;
  into.prefill_blocks_computed += u.prefill_blocks_computed;
  into.prefill_blocks_causal += u.prefill_blocks_causal;
}

json chat_logprobs_json(const std::vector<TokenLogprobs>& lps, const ResponseMeta& meta) {
  json content = json::array();
  for (const auto& lp : lps) {
    const std::string tok = meta.token_text ? meta.token_text(lp.token_id) : std::to_string(lp.token_id);
    json top = json::array();
    for (const auto& t : lp.top) {
      const std::string tt = meta.token_text ? meta.token_text(t.token_id) : std::to_string(t.token_id);
      top.push_back({{"token", tt}, {"logprob", t.logprob}, {"bytes", bytes_of(tt)}});
    }
    content.push_back({{"token", tok}, {"logprob", lp.logprob}, {"bytes", bytes_of(tok)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs_json(const std::vector<TokenLogprobs>& lps, const ResponseMeta& meta, size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    const std::string tok = meta.token_text ? meta.token_text(lp.token_id) : std::to_string(lp.token_id);
    tokens.push_back(tok);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& t : lp.top) top[meta.token_text ? meta.token_text(t.token_id) : std::to_string(t.token_id)] = t.logprob;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += tok.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json error_json(const RequestFailure& f) {
  json e = {{"message", f.message}, {"type", f.type}, {"param", nullptr}, {"code", f.status}};
  if (!f.param.empty()) e["param"] = f.param;
  return {{"error", e}};
}

// ---- streaming -------------------------------------------------------------------------------

CompletionStream::CompletionStream(ResponseMeta meta, std::vector<RequestHandle> handles, OutcomeHook hook)
    : meta_(std::move(meta)), handles_(std::move(handles)), hook_(std::move(hook)) {
  const size_t choices = handles_.size() * static_cast<size_t>(meta_.n);
  started_.assign(choices, false);
  started_tool_.assign(choices, false);
  finished_.assign(handles_.size(), false);
  finish_reasons_.assign(choices, "");
  if (meta_.kind == ApiKind::Chat && meta_.tools.active())
    for (size_t i = 0; i < choices; ++i) tool_streams_.push_back(std::make_unique<ToolCallStreamer>(meta_.tools, meta_.tool_format));
}

json CompletionStream::tool_delta(int index, const RequestEvent& e, std::string& finish) {
  ToolCallStreamer& ts = *tool_streams_[static_cast<size_t>(index)];
  json delta = json::object();
  if (meta_.tools.choice == ToolChoice::Named) {
    // The arguments stream as they come, after one chunk naming the function (as vLLM does).
    json call = {{"index", 0}, {"function", {{"arguments", e.text}}}};
    if (!started_tool_[static_cast<size_t>(index)]) {
      started_tool_[static_cast<size_t>(index)] = true;
      call = tool_calls_json({{meta_.tools.named, e.text}}, true)[0];
    }
    if (!e.text.empty() || call.contains("id")) delta["tool_calls"] = json::array({call});
    return delta;
  }
  const std::string content = ts.push(e.text);
  std::string tail;
  if (e.finish_reason != FinishReason::None) {
    ToolOutput o = ts.finish();
    tail = o.content;
    if (!o.calls.empty()) {
      delta["tool_calls"] = tool_calls_json(o.calls, true);
      if (finish == "stop") finish = "tool_calls";
    }
  }
  if (!content.empty() || !tail.empty()) delta["content"] = content + tail;
  return delta;
}

std::shared_ptr<CompletionStream> CompletionStream::create(ResponseMeta meta, std::vector<RequestHandle> handles,
                                                           OutcomeHook hook) {
  auto s = std::make_shared<CompletionStream>(std::move(meta), std::move(handles), std::move(hook));
  std::weak_ptr<CompletionStream> weak = s;
  for (auto& h : s->handles_)
    h.channel().set_notify([weak] {
      if (auto self = weak.lock()) self->pump();
    });
  return s;
}

CompletionStream::~CompletionStream() {
  for (auto& h : handles_) h.channel().set_notify(nullptr);
}

std::string CompletionStream::event_chunks(const RequestEvent& e, int prompt) {
  const int index = prompt * meta_.n + e.index;
  std::string out;
  auto chunk = [&](json choice) {
    json c = {{"id", meta_.id}, {"object", object_name(meta_.kind, true)}, {"created", meta_.created},
              {"model", meta_.model}, {"choices", json::array({choice})}};
    out += "data: " + c.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  };
  if (meta_.kind == ApiKind::Chat && !started_[index] && (!e.token_ids.empty() || e.finish_reason != FinishReason::None)) {
    started_[index] = true;
    chunk({{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  }
  const bool has_output = !e.text.empty() || (!e.logprobs.empty());
  if (has_output || e.finish_reason != FinishReason::None) {
    json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    std::string finish = e.finish_reason != FinishReason::None ? finish_reason_name(e.finish_reason) : "";
    if (meta_.kind == ApiKind::Chat && !tool_streams_.empty()) {
      choice["delta"] = tool_delta(index, e, finish);
      if (meta_.chat_logprobs && !e.logprobs.empty()) choice["logprobs"] = chat_logprobs_json(e.logprobs, meta_);
    } else if (meta_.kind == ApiKind::Chat) {
      choice["delta"] = e.text.empty() ? json::object() : json{{"content", e.text}};
      if (meta_.chat_logprobs && !e.logprobs.empty()) choice["logprobs"] = chat_logprobs_json(e.logprobs, meta_);
    } else {
      choice["text"] = e.text;
      if (!e.logprobs.empty()) choice["logprobs"] = completion_logprobs_json(e.logprobs, meta_, 0);
    }
    if (meta_.return_token_ids) choice["token_ids"] = e.token_ids;
    if (e.finish_reason != FinishReason::None) {
      choice["finish_reason"] = finish;
      choice["stop_reason"] = stop_reason_json(e);
      finish_reasons_[index] = finish;
    }
    if (!tool_streams_.empty() && choice["delta"].empty() && e.finish_reason == FinishReason::None &&
        !meta_.return_token_ids && choice["logprobs"].is_null())
      return out;  // held back
    chunk(choice);
  }
  return out;
}

std::string CompletionStream::drain_locked() {
  std::string out;
  for (size_t p = 0; p < handles_.size() && !ended_; ++p) {
    while (!finished_[p]) {
      std::optional<RequestEvent> e = handles_[p].channel().try_pop();
      if (!e) break;
      if (e->error) {
        failure_ = e->error;
        out += "data: " + error_json(*e->error).dump() + "\n\n";
        finished_.assign(finished_.size(), true);
        error_ = true;
        break;
      }
      out += event_chunks(*e, static_cast<int>(p));
      if (!e->token_ids.empty()) clock_.tick(meta_);
      if (e->usage) add_usage(usage_, *e->usage);
      if (e->done) finished_[p] = true;
    }
  }
  bool all = true;
  for (bool f : finished_) all = all && f;
  if (all && !ended_) {
    if (meta_.include_usage && !error_) {
      json c = {{"id", meta_.id}, {"object", object_name(meta_.kind, true)}, {"created", meta_.created},
                {"model", meta_.model}, {"choices", json::array()}, {"usage", usage_json(usage_)}};
      out += "data: " + c.dump() + "\n\n";
    }
    out += "data: [DONE]\n\n";
    ended_ = true;
    if (hook_) hook_(CompletionOutcome{usage_, clock_.ttft_s, clock_.itl_s, finish_reasons_, failure_});
  }
  return out;
}

void CompletionStream::next(std::function<void(std::optional<std::string>)> deliver) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ended_) {
    lock.unlock();
    deliver(std::nullopt);
    return;
  }
  std::string out = drain_locked();
  if (!out.empty()) {
    lock.unlock();
    deliver(std::move(out));
    return;
  }
  waiting_ = std::move(deliver);
}

void CompletionStream::pump() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!waiting_) return;
  std::string out = drain_locked();
  if (out.empty()) return;
  auto deliver = std::move(waiting_);
  waiting_ = nullptr;
  lock.unlock();
  deliver(std::move(out));
}

void CompletionStream::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_ = nullptr;
  for (auto& h : handles_) {
    h.channel().set_notify(nullptr);
    h.cancel();
  }
  if (!ended_ && hook_) {
    ended_ = true;
    hook_(CompletionOutcome{usage_, clock_.ttft_s, clock_.itl_s, finish_reasons_,
                            RequestFailure{499, "client_closed", "client disconnected", ""}});
  }
}

// ---- whole responses -------------------------------------------------------------------------

CompletionCollector::CompletionCollector(ResponseMeta meta, std::vector<RequestHandle> handles, OutcomeHook hook)
    : meta_(std::move(meta)), handles_(std::move(handles)), hook_(std::move(hook)) {
  finished_.assign(handles_.size(), false);
  choices_.resize(handles_.size() * static_cast<size_t>(meta_.n));
}

void CompletionCollector::wait(std::function<void(HttpReply)> deliver) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    deliver_ = std::move(deliver);
  }
  std::weak_ptr<CompletionCollector> weak = shared_from_this();
  for (auto& h : handles_)
    h.channel().set_notify([weak] {
      if (auto self = weak.lock()) self->pump();
    });
  pump();  // events pushed before the notify was set
}

void CompletionCollector::pump() {
  std::unique_lock<std::mutex> lock(mu_);
  if (delivered_ || !deliver_) return;
  for (size_t p = 0; p < handles_.size(); ++p) {
    while (!finished_[p]) {
      std::optional<RequestEvent> e = handles_[p].channel().try_pop();
      if (!e) break;
      if (e->error) {
        failure_ = e->error;
        finished_.assign(finished_.size(), true);
        break;
      }
      Choice& c = choices_[p * static_cast<size_t>(meta_.n) + static_cast<size_t>(e->index)];
      c.text += e->text;
      c.token_ids.insert(c.token_ids.end(), e->token_ids.begin(), e->token_ids.end());
      c.logprobs.insert(c.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
      if (!e->token_ids.empty()) clock_.tick(meta_);
      if (e->finish_reason != FinishReason::None) {
        c.finish_reason = finish_reason_name(e->finish_reason);
        c.stop_reason = stop_reason_json(*e);
      }
      if (e->usage) add_usage(usage_, *e->usage);
      if (e->done) finished_[p] = true;
    }
  }
  for (bool f : finished_)
    if (!f) return;
  delivered_ = true;
  HttpReply reply = build();
  auto deliver = std::move(deliver_);
  std::vector<std::string> reasons;
  for (const auto& c : choices_) reasons.push_back(c.finish_reason);
  CompletionOutcome outcome{usage_, clock_.ttft_s, clock_.itl_s, reasons, failure_};
  lock.unlock();
  for (auto& h : handles_) h.channel().set_notify(nullptr);
  if (hook_) hook_(outcome);
  deliver(std::move(reply));
}

HttpReply CompletionCollector::build() const {
  if (failure_) return HttpReply::json(failure_->status, error_json(*failure_).dump());
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i}, {"finish_reason", c.finish_reason}, {"stop_reason", c.stop_reason}, {"logprobs", nullptr}};
    if (meta_.kind == ApiKind::Chat && meta_.tools.active()) {
      const ToolOutput o = parse_tool_output(c.text, meta_.tools, meta_.tool_format);
      choice["message"] = {{"role", "assistant"}, {"content", o.content}};
      if (!o.calls.empty()) {
        if (o.content.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(o.calls, false);
        if (c.finish_reason == "stop" && meta_.tools.choice != ToolChoice::Named) choice["finish_reason"] = "tool_calls";
      }
      if (meta_.chat_logprobs) choice["logprobs"] = chat_logprobs_json(c.logprobs, meta_);
    } else if (meta_.kind == ApiKind::Chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (meta_.chat_logprobs) choice["logprobs"] = chat_logprobs_json(c.logprobs, meta_);
    } else {
      const size_t prompt = i / static_cast<size_t>(meta_.n);
      const std::string prefix = prompt < meta_.echo_prefix.size() ? meta_.echo_prefix[prompt] : "";
      choice["text"] = prefix + c.text;
      if (!c.logprobs.empty()) choice["logprobs"] = completion_logprobs_json(c.logprobs, meta_, prefix.size());
    }
    if (meta_.return_token_ids) choice["token_ids"] = c.token_ids;
    choices.push_back(choice);
  }
  json body = {{"id", meta_.id}, {"object", object_name(meta_.kind, false)}, {"created", meta_.created},
               {"model", meta_.model}, {"choices", choices}, {"usage", usage_json(usage_)}};
  return HttpReply::json(200, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void CompletionCollector::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  // The reply may already be built and on its way (the client left between pump() and the
  // write): its outcome was recorded then, so record none here (each request ends once).
  const bool already_delivered = delivered_;
  delivered_ = true;
  for (auto& h : handles_) {
    h.channel().set_notify(nullptr);
    h.cancel();
  }
  if (hook_ && !already_delivered)
    hook_(CompletionOutcome{usage_, clock_.ttft_s, clock_.itl_s, {}, RequestFailure{499, "client_closed", "client disconnected", ""}});
}

}  // namespace vlm
