#include "engine/request_queue.h"

namespace vlm {

void RequestQueue::push_add(GenerationRequest request, std::shared_ptr<RequestChannel> channel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      channel->push(error_event(*closed_));
      return;
    }
    EngineCommand c;
    c.kind = EngineCommand::Kind::Add;
    c.request = std::move(request);
    c.channel = std::move(channel);
    pending_.push_back(std::move(c));
    ++num_adds_;
  }
  cv_.notify_one();
}

void RequestQueue::push_abort(std::string request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    EngineCommand c;
    c.kind = EngineCommand::Kind::Abort;
    c.request_id = std::move(request_id);
    pending_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void RequestQueue::push_reset_prefix_cache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    EngineCommand c;
    c.kind = EngineCommand::Kind::ResetPrefixCache;
    pending_.push_back(std::move(c));
  }
  cv_.notify_one();
}

std::vector<EngineCommand> RequestQueue::drain(bool wait, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (wait && pending_.empty() && !woken_) cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || woken_; });
  woken_ = false;
  std::vector<EngineCommand> out;
  out.swap(pending_);
  num_adds_ = 0;
  return out;
}

void RequestQueue::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

size_t RequestQueue::num_pending_adds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_adds_;
}

std::vector<EngineCommand> RequestQueue::close(RequestFailure failure) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = std::move(failure);
  std::vector<EngineCommand> out = std::move(pending_);
  pending_.clear();
  num_adds_ = 0;
  return out;
}

}  // namespace vlm
