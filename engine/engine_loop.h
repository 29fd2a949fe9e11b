// EngineLoop: runs an Engine on its own thread. Any thread submits requests and reads their
// events through a RequestHandle; dropping the handle cancels the request. Between steps the
// engine thread drains the RequestQueue; with nothing to do it checks block integrity once and
// sleeps until a command arrives.
// Failures: a step that throws past the engine (an invariant broken outside the model run) ends
// every live request with a 500 and the engine goes on if its block integrity still holds. A
// DeviceError (the GPU failed; its state is unknown), or a step failure that leaves the blocks
// broken, is fatal: every live request ends with a 500 (streams get an error event), later
// submits get a 503, failed() turns true (/health answers 503), the thread ends and on_failure
// runs once (vlm-server then exits non-zero once the replies are out, for an orchestrator to
// restart it).
#pragma once

#include <atomic>
#include <functional>
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
  // on_failure (optional) is called once on the engine thread when the engine fails for good.
  explicit EngineLoop(std::unique_ptr<Engine> engine, std::function<void()> on_failure = nullptr);
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

  // Whether the engine failed for good (see above), and why ("" while it has not).
  bool failed() const { return failed_.load(); }
  std::string failure() const;

  // A snapshot of the engine's stats after its latest step.
  EngineStats stats() const;
  const Engine& engine() const { return *engine_; }  // immutable parts only (config, validate)

  // Ends every live request with a 503 error event and stops the thread. Idempotent.
  void stop();

 private:
  void run();
  void handle(EngineCommand& command);
  void publish_stats();
  // The step failed with `e`: ends every live request; returns true when the failure is fatal.
  bool on_step_failure(const std::exception& e);
  void mark_failed(const std::string& why);  // failure_, then failed_

  std::unique_ptr<Engine> engine_;
  std::shared_ptr<RequestQueue> queue_;
  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::atomic<int64_t> num_waiting_{0};  // engine's waiting sequences, as of the latest step
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::function<void()> on_failure_;
  std::thread thread_;
};

}  // namespace vlm
