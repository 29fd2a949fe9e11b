#include "model/media/media_thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace vlm {

namespace {

// Media jobs (a batch of frames, a video's preprocessing) last milliseconds and come seldom: idle
// workers sleep at once rather than poll, which would take cores from FFmpeg's decoding threads.
constexpr int64_t kMediaSpinMicros = 0;

std::mutex g_mu;
std::unique_ptr<ThreadPool> g_pool;

}  // namespace

int default_media_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return std::clamp(static_cast<int>(hw), 1, 16);
}

ThreadPool& media_thread_pool() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_pool) {
    int n = default_media_threads();
    if (const char* env = std::getenv("VLM_MEDIA_THREADS")) n = std::max(1, std::atoi(env));
    g_pool = std::make_unique<ThreadPool>(n, kMediaSpinMicros);
  }
  return *g_pool;
}

void set_media_threads(int n) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pool = std::make_unique<ThreadPool>(std::max(1, n), kMediaSpinMicros);
}

}  // namespace vlm
