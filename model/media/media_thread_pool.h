// The thread pool of the host media work (video frames' RGB conversion, Qwen2-VL preprocessing):
// a ThreadPool (kernels/core/thread_pool.h) of its own, so that media work never takes the
// engine's pool (global_thread_pool) from a decode step, nor the other way round. Created on
// first use with min(hardware threads, 16) threads (VLM_MEDIA_THREADS overrides the count); its
// idle workers sleep at once instead of polling for the next job (media jobs are long and sparse).
// ThreadPool::parallel_for is not re-entrant: while one request's media work holds the pool, a
// second request's parallel_for runs serially on its own thread (still correct, just slower),
// so concurrent media work is bounded by the server's media workers, not by this pool.
#pragma once

#include "kernels/core/thread_pool.h"

namespace vlm {

ThreadPool& media_thread_pool();
// Recreates the media pool with n threads (n >= 1). Not safe while media work runs.
void set_media_threads(int n);
// min(std::thread::hardware_concurrency(), 16), at least 1: the default thread count of the media
// pool and of FFmpeg's decoding threads (VideoLimits::decode_threads = 0).
int default_media_threads();

}  // namespace vlm
