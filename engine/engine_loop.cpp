#include "engine/engine_loop.h"

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)), queue_(std::make_shared<RequestQueue>()) {
  publish_stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

RequestHandle EngineLoop::submit(GenerationRequest request, std::function<void()> notify) {
  if (stop_) throw RequestError(503, "unavailable_error", "the engine is shutting down");
  engine_->validate(request);  // const, reads only the configuration
  Engine::fill_media_keys(request);  // hashes the pixels here, not on the engine thread
  request.submitted_at = std::chrono::steady_clock::now();
  const int max_waiting = engine_->config().scheduler.max_waiting;
  if (num_waiting_.load() + static_cast<int64_t>(queue_->num_pending_adds()) >= max_waiting)
    throw RequestError(429, "rate_limit_exceeded",
                       fmt::format("The server is busy: {} requests are already waiting. Retry later.", max_waiting));
  auto channel = std::make_shared<RequestChannel>();
  if (notify) channel->set_notify(std::move(notify));
  std::string id = request.id;
  std::weak_ptr<RequestQueue> queue = queue_;
  queue_->push_add(std::move(request), channel);
  return RequestHandle(id, channel, [queue, id] {
    if (auto q = queue.lock()) q->push_abort(id);
  });
}

void EngineLoop::abort(const std::string& request_id) { queue_->push_abort(request_id); }

void EngineLoop::reset_prefix_cache() { queue_->push_reset_prefix_cache(); }

EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void EngineLoop::stop() {
  if (stop_.exchange(true)) return;
  queue_->wake();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::handle(EngineCommand& c) {
  if (c.kind == EngineCommand::Kind::Abort) {
    engine_->abort_request(c.request_id);
    return;
  }
  if (c.kind == EngineCommand::Kind::ResetPrefixCache) {
    engine_->reset_prefix_cache();
    return;
  }
  try {
    engine_->add_request(std::move(c.request), c.channel);
  } catch (const RequestError& e) {
    c.channel->push(error_event({e.status(), e.type(), e.what(), e.param()}));
  }
}

void EngineLoop::publish_stats() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = engine_->stats();
  num_waiting_ = stats_.num_waiting_seqs;
}

void EngineLoop::run() {
  bool idle_checked = false;
  while (!stop_) {
    const bool busy = engine_->has_unfinished();
    std::vector<EngineCommand> commands = queue_->drain(!busy, std::chrono::milliseconds(500));
    for (EngineCommand& c : commands) handle(c);
    if (engine_->has_unfinished()) {
      idle_checked = false;
      try {
        engine_->step();
      } catch (const std::exception& e) {
        // A broken invariant outside the model run: end every request, keep serving.
        VLM_LOG_ERROR("engine step failed, ending every live request: {}", e.what());
        engine_->fail_all({500, "server_error", std::string("internal error: ") + e.what(), ""});
      }
    } else if (!idle_checked) {
      engine_->check_idle();
      idle_checked = true;
    }
    publish_stats();
  }
  // Shutdown: requests still queued or live get an error.
  for (EngineCommand& c : queue_->drain(false, {}))
    if (c.kind == EngineCommand::Kind::Add)
      c.channel->push(error_event({503, "unavailable_error", "the engine is shutting down", ""}));
  engine_->fail_all({503, "unavailable_error", "the engine is shutting down", ""});
  publish_stats();
}

}  // namespace vlm
