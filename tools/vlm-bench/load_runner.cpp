#include "tools/vlm-bench/load_runner.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "tools/vlm-bench/stream_recorder.h"

namespace vlm::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  const PreparedRequest* request = nullptr;
  std::unique_ptr<StreamRecorder> recorder;
  Clock::time_point origin;
  long status = 0;
  long long* chunk_counter = nullptr;

  double now_s() const { return std::chrono::duration<double>(Clock::now() - origin).count(); }
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const double now = t->now_s();
  if (t->status == 0) curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
  const int before = t->recorder->sample().content_chunks;
  t->recorder->feed(data, size * n, static_cast<int>(t->status), now);
  *t->chunk_counter += t->recorder->sample().content_chunks - before;
  return size * n;
}

std::string kind_of(CURLcode rc) {
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT: return "timeout";
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST: return "connect";
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return "connection_lost";
    default: return "curl_" + std::to_string(static_cast<int>(rc));
  }
}

}  // namespace

LoadRunner::LoadRunner(const BenchOptions& options) : options_(options) {}

RunResult LoadRunner::run(const std::vector<PreparedRequest>& requests, const std::vector<double>& schedule,
                          int max_concurrency, double deadline_s,
                          const std::function<void(const RunProgress&)>& on_progress) {
  if (schedule.size() != requests.size()) throw std::invalid_argument("LoadRunner::run: schedule size != requests");
  CURLM* multi = curl_multi_init();
  if (!multi) throw std::runtime_error("curl_multi_init failed");
  const std::string url = options_.url(options_.api_path());
  const bool chat = options_.endpoint == "chat";
  const Clock::time_point origin = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - origin).count(); };

  RunResult result;
  result.samples.resize(requests.size());
  std::vector<std::unique_ptr<Transfer>> open(requests.size());
  size_t next = 0;
  int active = 0, done = 0, failed = 0;
  long long chunks = 0;
  double first_start = -1, last_end = 0, last_progress = -1;

  auto start = [&](size_t i) {
    auto t = std::make_unique<Transfer>();
    t->easy = curl_easy_init();
    if (!t->easy) throw std::runtime_error("curl_easy_init failed");
    t->request = &requests[i];
    t->origin = origin;
    t->chunk_counter = &chunks;
    t->headers = curl_slist_append(t->headers, "Content-Type: application/json");
    t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue round trip for big bodies
    if (options_.stream) t->headers = curl_slist_append(t->headers, "Accept: text/event-stream");
    if (!options_.api_key.empty())
      t->headers = curl_slist_append(t->headers, ("Authorization: Bearer " + options_.api_key).c_str());
    CURL* e = t->easy;
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, requests[i].body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(requests[i].body.size()));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(options_.request_timeout_s, 30.0) * 1000));
    const double s = now_s();
    if (first_start < 0) first_start = s;
    t->recorder = std::make_unique<StreamRecorder>(static_cast<int>(i), chat, options_.stream, s, schedule[i]);
    curl_multi_add_handle(multi, e);
    open[i] = std::move(t);
    ++active;
  };

  auto finish = [&](size_t i, CURLcode rc) {
    Transfer& t = *open[i];
    long status = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
    const double end = now_s();
    last_end = std::max(last_end, end);
    std::string err, kind;
    if (rc != CURLE_OK) {
      err = curl_easy_strerror(rc);
      kind = kind_of(rc);
    }
    result.samples[i] = t.recorder->finish(static_cast<int>(status), err, kind, end);
    if (result.samples[i].success) ++done;
    else ++failed;
    curl_multi_remove_handle(multi, t.easy);
    curl_easy_cleanup(t.easy);
    curl_slist_free_all(t.headers);
    open[i].reset();
    --active;
  };

  auto report = [&](bool force) {
    const double s = now_s();
    if (!on_progress || (!force && s - last_progress < 0.1)) return;
    last_progress = s;
    on_progress(RunProgress{done, failed, active, static_cast<int>(requests.size()), chunks, s});
  };

  while (next < requests.size() || active > 0) {
    const double now = now_s();
    if (now >= deadline_s) {
      result.hit_deadline = true;
      for (size_t i = 0; i < open.size(); ++i) {
        if (!open[i]) continue;
        Transfer& t = *open[i];
        long status = 0;
        curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
        result.samples[i] = t.recorder->finish(static_cast<int>(status), "the run's --timeout was reached",
                                               "run_timeout", now);
        ++failed;
        curl_multi_remove_handle(multi, t.easy);
        curl_easy_cleanup(t.easy);
        curl_slist_free_all(t.headers);
        open[i].reset();
        --active;
      }
      for (; next < requests.size(); ++next) {
        RequestSample& s = result.samples[next];
        s.index = static_cast<int>(next);
        s.scheduled_s = s.start_s = s.end_s = schedule[next];
        s.failure_kind = "not_sent";
        s.error = "not sent before the run's --timeout";
        ++failed;
      }
      last_end = now;
      break;
    }
    while (next < requests.size() && schedule[next] <= now && (max_concurrency <= 0 || active < max_concurrency))
      start(next++);
    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* m = curl_multi_info_read(multi, &queued)) {
      if (m->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
      const CURLcode rc = m->data.result;
      finish(static_cast<size_t>(t->recorder->sample().index), rc);
    }
    report(false);
    // Sleep until a socket is ready, the next arrival is due, or 100 ms pass.
    double wait_s = 0.1;
    if (next < requests.size() && (max_concurrency <= 0 || active < max_concurrency))
      wait_s = std::min(wait_s, std::max(0.0, schedule[next] - now_s()));
    wait_s = std::min(wait_s, std::max(0.0, deadline_s - now_s()));
    if (active > 0 || wait_s > 0) curl_multi_poll(multi, nullptr, 0, static_cast<int>(std::ceil(wait_s * 1000)), nullptr);
  }
  report(true);
  curl_multi_cleanup(multi);
  result.duration_s = first_start < 0 ? 0.0 : std::max(0.0, last_end - first_start);
  return result;
}

}  // namespace vlm::bench
