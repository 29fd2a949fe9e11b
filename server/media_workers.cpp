#include "server/media_workers.h"

#include <optional>

#include "kernels/core/check.h"
#include "kernels/core/log.h"
#include "server/http/router.h"

namespace vlm {

namespace {

// Lets go of what a reply nobody will read holds (an engine request behind a stream).
void release(HttpReply& r) {
  if (r.stream) r.stream->cancel();
  if (r.deferred) r.deferred->cancel();
}

}  // namespace

class MediaWorkers::Job : public DeferredReply {
 public:
  explicit Job(std::function<HttpReply()> work) : work_(std::move(work)) {}

  void wait(std::function<void(HttpReply)> deliver) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (cancelled_) return;
    if (result_) {
      HttpReply r = std::move(*result_);
      result_.reset();
      lock.unlock();
      deliver(std::move(r));
      return;
    }
    deliver_ = std::move(deliver);
  }

  void cancel() override {
    std::optional<HttpReply> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      deliver_ = nullptr;
      dropped.swap(result_);
    }
    if (dropped) release(*dropped);
  }

  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  void run() {
    HttpReply reply;
    try {
      reply = work_();
    } catch (const RequestError& e) {
      reply = HttpReply::error(e.status(), e.type(), e.what(), e.param());
      if (e.status() == 503) reply.headers.emplace_back("Retry-After", kUnavailableRetryAfter);
    } catch (const std::exception& e) {
      VLM_LOG_ERROR("internal error in a media job: {}", e.what());
      reply = HttpReply::error(500, "internal_server_error", "internal error; see the server log");
    }
    work_ = nullptr;
    std::function<void(HttpReply)> deliver;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) {
        release(reply);
        return;
      }
      if (!deliver_) {
        result_ = std::move(reply);
        return;
      }
      deliver = std::move(deliver_);
    }
    deliver(std::move(reply));
  }

 private:
  mutable std::mutex mu_;
  std::function<HttpReply()> work_;
  std::function<void(HttpReply)> deliver_;
  std::optional<HttpReply> result_;
  bool cancelled_ = false;
};

MediaWorkers::MediaWorkers(int workers, int queue) : queue_limit_(queue) {
  VLM_CHECK(workers >= 1 && queue >= 0, "media workers ", workers, ", queue ", queue);
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
}

MediaWorkers::~MediaWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<DeferredReply> MediaWorkers::try_submit(std::function<HttpReply()> job) {
  auto j = std::make_shared<Job>(std::move(job));
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int idle = static_cast<int>(threads_.size()) - running_;
    if (static_cast<int>(queue_.size()) >= queue_limit_ + idle) {  // idle workers take jobs at once
      ++rejected_;
      return nullptr;
    }
    queue_.push_back(j);
  }
  cv_.notify_one();
  return j;
}

void MediaWorkers::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      if (job->cancelled()) continue;  // its client left while it waited
      ++running_;
    }
    job->run();
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
}

int MediaWorkers::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int MediaWorkers::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

int64_t MediaWorkers::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

}  // namespace vlm
