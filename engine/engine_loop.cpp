#include "engine/engine_loop.h"

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/device_error.h"
#include "kernels/core/log.h"

namespace vlm {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, std::function<void()> on_failure)
    : engine_(std::move(engine)), queue_(std::make_shared<RequestQueue>()), on_failure_(std::move(on_failure)) {
  publish_stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

RequestHandle EngineLoop::submit(GenerationRequest request, std::function<void()> notify) {
  if (failed_) throw RequestError(503, "unavailable_error", "the engine failed and the server is restarting: " + failure());
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

std::string EngineLoop::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void EngineLoop::mark_failed(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    failure_ = why;
  }
  failed_ = true;
  VLM_LOG_ERROR("engine failed for good: {}", why);
}

bool EngineLoop::on_step_failure(const std::exception& e) {
  const bool device = dynamic_cast<const DeviceError*>(&e) != nullptr;
  const std::string what = std::string(device ? "the compute device failed: " : "internal error: ") + e.what();
  VLM_LOG_ERROR("engine step failed, ending every live request: {}", what);
  // Failed before any request hears of it, so a client that got its error sees /health at 503.
  if (device) mark_failed(what);
  engine_->fail_all({500, "server_error", what, ""});
  if (device) return true;
  // A broken invariant outside the model run: the engine goes on when its blocks are still sound.
  if (engine_->check_idle()) return false;
  mark_failed(what + " (and the KV blocks are no longer consistent)");
  return true;
}

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
        if (on_step_failure(e)) break;
      }
    } else if (!idle_checked) {
      engine_->check_idle();
      idle_checked = true;
    }
    publish_stats();
  }
  // Shutdown (or failure): requests still queued or live get an error.
  const std::string why = failed_ ? "the engine failed and the server is restarting: " + failure()
                                  : std::string("the engine is shutting down");
  for (EngineCommand& c : queue_->close({503, "unavailable_error", why, ""}))
    if (c.kind == EngineCommand::Kind::Add) c.channel->push(error_event({503, "unavailable_error", why, ""}));
  engine_->fail_all({503, "unavailable_error", why, ""});
  publish_stats();
  if (failed_ && on_failure_) on_failure_();
}

}  // namespace vlm
