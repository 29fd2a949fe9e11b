#include "model/media/video_rgb_converter.h"

#include <algorithm>
#include <atomic>

#include <fmt/format.h>

extern "C" {
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include "kernels/core/check.h"
#include "model/media/media_thread_pool.h"

namespace vlm {

namespace {

struct SwsDeleter {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

// One decoded frame -> RGB24 of the same size in `img` (its allocation kept when big enough).
void to_rgb(const AVFrame* f, std::unique_ptr<SwsContext, SwsDeleter>& sws, RgbImage& img) {
  img.width = f->width;
  img.height = f->height;
  // swscale's SIMD writers may store past a tightly packed row's end (seen: a 56x56 frame corrupted
  // the heap). Rows are written top-down, so a row's spill lands in the next row before that row is
  // written; only the last row's spill leaves the image: give it slack, then drop the slack.
  const size_t bytes = static_cast<size_t>(f->width) * f->height * 3;
  img.pixels.resize(bytes + std::max<size_t>(256, static_cast<size_t>(f->width) * 3));
  sws.reset(sws_getCachedContext(sws.release(), f->width, f->height, static_cast<AVPixelFormat>(f->format), f->width,
                                 f->height, AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!sws)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("video pixel format '{}' cannot be converted to RGB",
                                   av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format))),
                       "video");
  uint8_t* dst[4] = {img.pixels.data(), nullptr, nullptr, nullptr};
  int stride[4] = {f->width * 3, 0, 0, 0};
  sws_scale(sws.get(), f->data, f->linesize, 0, f->height, dst, stride);
  img.pixels.resize(bytes);  // keeps the allocation: no copy
}

}  // namespace

struct VideoRgbConverter::Slot {
  std::unique_ptr<SwsContext, SwsDeleter> sws;  // swscale contexts are not shared between threads
  RgbImage scratch;                             // sink mode: the frame handed to the sink
  std::atomic<bool> busy{false};                // held by a running task
};

struct VideoRgbConverter::Batch {
  int64_t first = 0;  // k of frames[0]
  std::vector<AVFrame*> frames;
  ~Batch() {
    for (AVFrame*& f : frames) av_frame_free(&f);
  }
};

VideoRgbConverter::VideoRgbConverter(std::vector<RgbImage>& out, VideoFrameSink* sink, const VideoInfo& info,
                                     int64_t num_picked)
    : out_(out), sink_(sink), gathering_(std::make_unique<Batch>()) {
  if (sink_) begin_ = [sink, info, num_picked] { sink->begin(info, num_picked); };
  busy_ = static_cast<bool>(begin_);
  thread_ = std::thread([this] { run(); });
}

VideoRgbConverter::~VideoRgbConverter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  thread_.join();
}

void VideoRgbConverter::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

void VideoRgbConverter::add(const AVFrame* f) {
  AVFrame* ref = av_frame_clone(f);
  if (!ref) throw std::bad_alloc();
  gathering_->frames.push_back(ref);
  ++added_;
  if (static_cast<int64_t>(gathering_->frames.size()) >= kBatch) submit();
}

void VideoRgbConverter::submit() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() || error_; });
  rethrow_locked();
  auto next = std::make_unique<Batch>();
  next->first = added_;
  queue_.push_back(std::move(gathering_));
  gathering_ = std::move(next);
  lock.unlock();
  cv_.notify_all();
}

void VideoRgbConverter::finish() {
  if (!gathering_->frames.empty()) submit();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
  rethrow_locked();
}

void VideoRgbConverter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  if (begin_) {
    lock.unlock();
    std::exception_ptr err;
    try {
      begin_();
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (err && !error_) error_ = err;
    cv_.notify_all();
  }
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::unique_ptr<Batch> b = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    const bool failed = static_cast<bool>(error_);
    lock.unlock();
    cv_.notify_all();  // a waiting submit() may go on
    std::exception_ptr err;
    if (!failed) {
      try {
        convert(*b);
      } catch (...) {
        err = std::current_exception();
      }
    }
    b.reset();  // the frame references go back to the decoder
    lock.lock();
    busy_ = false;
    if (err && !error_) error_ = err;
    cv_.notify_all();
  }
}

void VideoRgbConverter::convert(Batch& b) {
  ThreadPool& pool = media_thread_pool();
  const auto n = static_cast<int64_t>(b.frames.size());
  // One task per frame, claimed dynamically (a descheduled worker leaves its share to the
  // others); a task takes a free slot: at most num_threads tasks run at once, so one is free.
  const auto num_slots = static_cast<size_t>(std::min<int64_t>(n, pool.num_threads()));
  while (slots_.size() < num_slots) slots_.push_back(std::make_unique<Slot>());
  if (!sink_) out_.resize(static_cast<size_t>(b.first + n));
  pool.run_tasks(n, [&](int64_t i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;  // the decoding gave up: drop the rest
    }
    Slot* slot = nullptr;
    for (size_t s = 0; !slot; s = (s + 1) % slots_.size()) {
      bool free = false;
      if (slots_[s]->busy.compare_exchange_strong(free, true)) slot = slots_[s].get();
    }
    struct Release {
      Slot* s;
      ~Release() { s->busy.store(false); }
    } release{slot};
    const AVFrame* f = b.frames[static_cast<size_t>(i)];
    if (sink_) {
      to_rgb(f, slot->sws, slot->scratch);
      sink_->frame(b.first + i, slot->scratch);
    } else {
      to_rgb(f, slot->sws, out_[static_cast<size_t>(b.first + i)]);
    }
  });
}

}  // namespace vlm
