// EngineLoop: runs an Engine on its own thread. Any thread submits requests and reads their
// events through a RequestHandle; dropping the handle cancels the request. Between steps the
// engine thread drains the RequestQueue; with nothing to do it checks block integrity once and
// sleeps until a command arrives.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "engine/request_channel.h"
#include "engine/request_queue.h"

namespace vlm {

class EngineLoop {
 public:
  // Starts the engine thread.
  explicit EngineLoop(std::unique_ptr<Engine> engine);
  // stop(), then joins.
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Checks the request at once (Engine::validate, and room in the waiting queue) and queues it.
  // Throws RequestError: 400 for a bad request, 429 when max_waiting requests already wait, 503
  // after stop(). Later problems (e.g. a duplicate id) arrive as an error event.
  // notify, if given, is called on the engine thread after each event is pushed (to wake an
  // event loop); it must not block for long, since the engine waits for it.
  RequestHandle submit(GenerationRequest request, std::function<void()> notify = nullptr);
  // Aborts a request by id (no-op when unknown or finished).
  void abort(const std::string& request_id);
  // Asks the engine thread to forget every cached prefix block (before its next step).
  void reset_prefix_cache();

  // A snapshot of the engine's stats after its latest step.
  EngineStats stats() const;
  const Engine& engine() const { return *engine_; }  // immutable parts only (config, validate)

  // Ends every live request with a 503 error event and stops the thread. Idempotent.
  void stop();

 private:
  void run();
  void handle(EngineCommand& command);
  void publish_stats();

  std::unique_ptr<Engine> engine_;
  std::shared_ptr<RequestQueue> queue_;
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::atomic<int64_t> num_waiting_{0};  // engine's waiting sequences, as of the latest step
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace vlm
