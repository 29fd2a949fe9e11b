// RequestQueue: commands from any thread (HTTP sessions, dropped handles) to the engine thread.
// The engine thread drains it between steps; when it has nothing to do it waits here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/request_channel.h"

namespace vlm {

struct EngineCommand {
  enum class Kind { Add, Abort, ResetPrefixCache };
  Kind kind = Kind::Add;
  GenerationRequest request;                // Add
  std::shared_ptr<RequestChannel> channel;  // Add
  std::string request_id;                   // Abort
};

class RequestQueue {
 public:
  // After close(): the channel gets the close failure at once instead (nothing is queued).
  void push_add(GenerationRequest request, std::shared_ptr<RequestChannel> channel);
  void push_abort(std::string request_id);
  void push_reset_prefix_cache();
  // Takes every pending command. When none is pending and `wait` is set, waits up to `timeout`
  // for one (or for shutdown()).
  std::vector<EngineCommand> drain(bool wait, std::chrono::milliseconds timeout);
  // Wakes a waiting drain(); later pushes are still accepted (and drained).
  void wake();
  size_t num_pending_adds() const;
  // Refuses every later push_add with `failure` (the engine thread is gone); returns the
  // commands still pending, for the caller to answer.
  std::vector<EngineCommand> close(RequestFailure failure);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EngineCommand> pending_;
  size_t num_adds_ = 0;
  bool woken_ = false;
  std::optional<RequestFailure> closed_;
};

}  // namespace vlm
