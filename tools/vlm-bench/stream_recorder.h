// StreamRecorder: turns the bytes of one response into a RequestSample. For a 200 streaming reply
// it splits server-sent events (blank-line separated, `data:` lines, `:` comments skipped) and
// times every chunk at arrival; otherwise it keeps the body for the final parse or error message.
// Chunk rules follow `vllm bench serve` (shared/SERVING.md d.1): a chunk with non-empty `choices`
// stops TTFT / adds an ITL gap / moves E2EL; the usage chunk and `[DONE]` do not.
#pragma once

#include <string>

#include "tools/vlm-bench/report/bench_metrics.h"

namespace vlm::bench {

class StreamRecorder {
 public:
  // chat: read choices[0].delta.content (else choices[0].text). start_s: when the request was
  // sent, on the same clock as the times given to feed() and finish().
  StreamRecorder(int index, bool chat, bool stream, double start_s, double scheduled_s);

  // Bytes of the body as they arrive at now_s. http_status: the response status (known once
  // the body starts).
  void feed(const char* data, size_t size, int http_status, double now_s);

  // The transfer ended at now_s. transport_error: empty on success, else the libcurl message;
  // transport_kind: "timeout", "connect", ... Returns the finished sample.
  RequestSample finish(int http_status, const std::string& transport_error, const std::string& transport_kind,
                       double now_s);

  const RequestSample& sample() const { return sample_; }

 private:
  void on_event(const std::string& data, double now_s);
  void on_json(const std::string& payload, double now_s, bool streamed);

  bool chat_, stream_;
  RequestSample sample_;
  std::string buffer_;        // SSE bytes not yet split into events, or the whole non-SSE body
  std::string stream_error_;  // an {"error": ...} event
  double last_choice_s_ = -1;
  bool saw_choice_ = false;
};

}  // namespace vlm::bench
