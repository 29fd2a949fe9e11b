#include "tools/vlm-bench/stream_recorder.h"

#include <nlohmann/json.hpp>

namespace vlm::bench {
namespace {

constexpr size_t kMaxErrorBody = 4096;

std::string string_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

// The message of an OpenAI error envelope, else the body itself (cut short).
std::string error_message(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
    if (e.is_string()) return e.get<std::string>();
  }
  return body.substr(0, 300);
}

}  // namespace

StreamRecorder::StreamRecorder(int index, bool chat, bool stream, double start_s, double scheduled_s)
    : chat_(chat), stream_(stream) {
  sample_.index = index;
  sample_.start_s = start_s;
  sample_.scheduled_s = scheduled_s;
}

void StreamRecorder::feed(const char* data, size_t size, int http_status, double now_s) {
  if (http_status != 200 || !stream_) {
    if (http_status == 200 || buffer_.size() < kMaxErrorBody) buffer_.append(data, size);
    return;
  }
  for (size_t i = 0; i < size; ++i)
    if (data[i] != '\r') buffer_.push_back(data[i]);
  size_t end;
  while ((end = buffer_.find("\n\n")) != std::string::npos) {
    const std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + 2);
    // Join the `data:` lines of the event; skip comments and other fields.
    std::string payload;
    bool has_data = false;
    size_t pos = 0;
    while (pos <= event.size()) {
      size_t nl = event.find('\n', pos);
      if (nl == std::string::npos) nl = event.size();
      std::string line = event.substr(pos, nl - pos);
      pos = nl + 1;
      if (line.rfind("data:", 0) != 0) continue;
      line.erase(0, 5);
      if (!line.empty() && line[0] == ' ') line.erase(0, 1);
      if (has_data) payload += '\n';
      payload += line;
      has_data = true;
    }
    if (has_data) on_event(payload, now_s);
  }
}

void StreamRecorder::on_event(const std::string& data, double now_s) {
  if (sample_.done_seen) {
    ++sample_.chunks_after_done;
    return;
  }
  if (data == "[DONE]") {
    sample_.done_seen = true;
    return;
  }
  on_json(data, now_s, true);
}

void StreamRecorder::on_json(const std::string& payload, double now_s, bool streamed) {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (stream_error_.empty()) stream_error_ = "unparsable chunk: " + payload.substr(0, 200);
    return;
  }
  if (j.contains("error") && !j["error"].is_null()) {
    if (stream_error_.empty()) stream_error_ = "error in stream: " + error_message(payload);
    return;
  }
  auto usage = j.find("usage");
  if (usage != j.end() && usage->is_object()) {
    sample_.usage_seen = true;
    sample_.prompt_tokens = usage->value("prompt_tokens", 0);
    sample_.output_tokens = usage->value("completion_tokens", 0);
    if (auto d = usage->find("prompt_tokens_details"); d != usage->end() && d->is_object())
      sample_.cached_tokens = d->value("cached_tokens", 0);
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return;
  const nlohmann::json& c = (*choices)[0];
  std::string text;
  if (chat_) {
    const char* holder = streamed ? "delta" : "message";
    if (c.contains(holder) && c[holder].is_object()) {
      const auto& d = c[holder];
      text = string_field(d, "content");
      if (text.empty()) text = string_field(d, "reasoning_content");
      if (text.empty()) text = string_field(d, "reasoning");
      if (d.contains("role")) ++sample_.role_chunks;
    }
  } else {
    text = string_field(c, "text");
  }
  const double t = now_s - sample_.start_s;
  if (!saw_choice_) {
    sample_.ttft_s = t;
    saw_choice_ = true;
  } else {
    sample_.itl_s.push_back(now_s - last_choice_s_);
  }
  last_choice_s_ = now_s;
  sample_.e2el_s = t;
  if (!text.empty()) {
    if (sample_.content_chunks == 0) sample_.ttft_content_s = t;
    ++sample_.content_chunks;
    sample_.content_chunk_s.push_back(now_s);
    sample_.text += text;
  }
}

RequestSample StreamRecorder::finish(int http_status, const std::string& transport_error,
                                     const std::string& transport_kind, double now_s) {
  RequestSample& s = sample_;
  s.http_status = http_status;
  s.end_s = now_s;
  auto fail = [&](const std::string& kind, const std::string& message) {
    s.success = false;
    s.failure_kind = kind;
    s.error = message;
  };
  if (!transport_error.empty()) {
    fail(transport_kind, transport_error + (http_status ? " (HTTP " + std::to_string(http_status) + ")" : ""));
    return s;
  }
  if (http_status != 200) {
    fail(std::to_string(http_status), "HTTP " + std::to_string(http_status) + ": " + error_message(buffer_));
    return s;
  }
  if (!stream_) {
    on_json(buffer_, now_s, false);
    s.done_seen = true;  // not applicable
    if (s.role_chunks > 0) s.role_chunks = 1;
  }
  if (!stream_error_.empty()) {
    fail("stream_error", stream_error_);
    return s;
  }
  if (!saw_choice_) {
    fail("no_tokens", "the response carried no chunk with choices");
    return s;
  }
  if (!s.usage_seen) s.output_tokens = s.content_chunks;
  s.success = true;
  return s;
}

}  // namespace vlm::bench
