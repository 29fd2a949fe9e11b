// MediaWorkers: a bounded pool of threads for the requests that carry media, so that fetching,
// decoding and preprocessing a long video (seconds of CPU) never runs on the HTTP server's I/O
// threads, which keep accepting connections and writing other requests' streams meanwhile.
//
// A request handler hands its whole work to try_submit(); the handler's reply becomes a
// DeferredReply (server/http/http_types.h) that the connection waits on. At most `workers` jobs
// run at once and at most `queue` wait; beyond that try_submit returns null and the caller answers
// 503 with Retry-After (ApiServer: "media workers are busy", --media-workers / --media-queue).
// A job whose client left before it started is dropped unrun; one that finished after its client
// left has its reply's stream or deferred reply cancelled (the engine request is let go).
// A job's RequestError becomes its error reply (OpenAI envelope, its status; 503 with Retry-After),
// any other exception a 500, as the router does for handlers on the I/O threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/http/http_types.h"

namespace vlm {

class MediaWorkers {
 public:
  // workers >= 1 threads, queue >= 0 waiting jobs.
  MediaWorkers(int workers, int queue);
  // Drops the waiting jobs (their replies never come: the HTTP server closes their connections
  // when it stops) and joins the threads after their running jobs.
  ~MediaWorkers();
  MediaWorkers(const MediaWorkers&) = delete;
  MediaWorkers& operator=(const MediaWorkers&) = delete;

  // Queues `job`; returns the reply to wait on, or nullptr when every worker is busy and `queue`
  // jobs already wait.
  std::shared_ptr<DeferredReply> try_submit(std::function<HttpReply()> job);

  int running() const;
  int waiting() const;
  int64_t rejected() const;  // try_submit calls that returned nullptr

 private:
  class Job;
  void loop();

  const int queue_limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  int running_ = 0;
  int64_t rejected_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace vlm
