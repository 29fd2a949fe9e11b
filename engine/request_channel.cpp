#include "engine/request_channel.h"

namespace vlm {

void RequestChannel::push(RequestEvent event) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = event.done;
    events_.push_back(std::move(event));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

std::optional<RequestEvent> RequestChannel::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !events_.empty() || done_; });
  if (events_.empty()) return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<RequestEvent> RequestChannel::pop_for(std::chrono::milliseconds timeout, bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool ready = cv_.wait_for(lock, timeout, [&] { return !events_.empty() || done_; });
  if (timed_out) *timed_out = !ready;
  if (events_.empty()) return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::optional<RequestEvent> RequestChannel::try_pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestChannel::set_notify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = std::move(notify);
}

bool RequestChannel::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool RequestChannel::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void RequestChannel::cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

RequestHandle::RequestHandle(std::string request_id, std::shared_ptr<RequestChannel> channel,
                             std::function<void()> on_drop)
    : request_id_(std::move(request_id)), channel_(std::move(channel)), on_drop_(std::move(on_drop)) {}

RequestHandle::~RequestHandle() { cancel(); }

RequestHandle::RequestHandle(RequestHandle&& o) noexcept
    : request_id_(std::move(o.request_id_)), channel_(std::move(o.channel_)), on_drop_(std::move(o.on_drop_)) {
  o.on_drop_ = nullptr;
}

RequestHandle& RequestHandle::operator=(RequestHandle&& o) noexcept {
  if (this != &o) {
    cancel();
    request_id_ = std::move(o.request_id_);
    channel_ = std::move(o.channel_);
    on_drop_ = std::move(o.on_drop_);
    o.on_drop_ = nullptr;
  }
  return *this;
}

void RequestHandle::cancel() {
  if (!channel_ || !on_drop_) return;
  auto on_drop = std::move(on_drop_);
  on_drop_ = nullptr;
  if (channel_->done()) return;
  channel_->cancel();
  on_drop();
}

}  // namespace vlm
