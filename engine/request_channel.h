// RequestChannel: the per-request event stream from the engine thread to one reader (an HTTP
// session). The engine pushes; the reader pops, blocking or with a timeout, or is woken through
// a notify callback (for an event loop). RequestHandle is the reader's end: dropping it before
// the stream is done cancels the request (the engine aborts it and frees its KV blocks).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/request.h"

namespace vlm {

class RequestChannel {
 public:
  // Engine side. Events after the one with done = true are ignored.
  void push(RequestEvent event);
  // Reader side: the next event; std::nullopt once the stream is done and drained, or when the
  // timeout passes (then `timed_out` is set, if given).
  std::optional<RequestEvent> pop();
  std::optional<RequestEvent> pop_for(std::chrono::milliseconds timeout, bool* timed_out = nullptr);
  std::optional<RequestEvent> try_pop();
  // Called (on the engine thread, without the lock held) after each push. Set it before
  // submitting the request.
  void set_notify(std::function<void()> notify);

  bool done() const;       // the final event was pushed
  bool cancelled() const;  // the reader went away
  void cancel();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  std::function<void()> notify_;
  bool done_ = false;
  bool cancelled_ = false;
};

class RequestHandle {
 public:
  RequestHandle() = default;
  // on_drop: called once when the handle is dropped before the stream is done (posts an abort).
  RequestHandle(std::string request_id, std::shared_ptr<RequestChannel> channel, std::function<void()> on_drop);
  ~RequestHandle();
  RequestHandle(RequestHandle&&) noexcept;
  RequestHandle& operator=(RequestHandle&&) noexcept;

  const std::string& request_id() const { return request_id_; }
  RequestChannel& channel() { return *channel_; }
  std::optional<RequestEvent> next() { return channel_->pop(); }
  // Cancels now (same as dropping the handle).
  void cancel();

 private:
  std::string request_id_;
  std::shared_ptr<RequestChannel> channel_;
  std::function<void()> on_drop_;
};

}  // namespace vlm
