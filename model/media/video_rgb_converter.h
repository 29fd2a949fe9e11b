// The RGB conversion of the frames decode_video picks (model/media/video_decode.h), apart from the
// demuxing and decoding, and beside it: decoded frames (references to the decoder's buffers) are
// gathered into batches, and a conversion thread of this converter takes each full batch to
// media_thread_pool() (model/media/media_thread_pool.h) while the decoding thread goes on feeding
// the decoder. Each frame is converted with swscale's SWS_BICUBIC to RGB24 of the same size (as
// OpenCV's reader does). At most one full batch waits while another converts (add() blocks
// until then): at most 3 * kBatch frame references are held.
//
// Two destinations: a frame list (DecodedVideo::frames, in pick order), or a VideoFrameSink whose
// frame(k, rgb) is called on the pool's threads with a per-task scratch image that is reused from
// frame to frame (no image is allocated per frame, none is kept). Same pixels either way. With a
// sink, its begin() runs first on the conversion thread (so its set-up overlaps the decoding).
//
// Internal to video_decode.cpp (libav types); built only with FFmpeg (VLM_VIDEO_FILES).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/media/image_decode.h"
#include "model/media/video_decode.h"

struct AVFrame;

namespace vlm {

class VideoRgbConverter {
 public:
  // Appends to `out` when `sink` is null, else calls sink->begin(info, num_picked) once and then
  // sink->frame(k, rgb), k counting the frames add()ed from 0. `out` and `sink` outlive the
  // converter.
  VideoRgbConverter(std::vector<RgbImage>& out, VideoFrameSink* sink, const VideoInfo& info, int64_t num_picked);
  // Stops the conversion thread (a batch being converted ends after its running frames).
  ~VideoRgbConverter();
  VideoRgbConverter(const VideoRgbConverter&) = delete;
  VideoRgbConverter& operator=(const VideoRgbConverter&) = delete;

  // Takes a new reference to f's buffers (the caller may unref f); hands a full batch to the
  // conversion thread. Rethrows a conversion's or the sink's first error (RequestError 400 for a
  // pixel format swscale cannot convert).
  void add(const AVFrame* f);
  // Converts what waits and returns when every frame add()ed is converted; rethrows as add().
  void finish();

 private:
  struct Slot;   // a running task's swscale context and scratch image (one per pool thread)
  struct Batch;  // owned frame references and the k of the first
  static constexpr int64_t kBatch = 16;

  void submit();  // the gathering batch -> the queue (blocks while one already waits)
  void run();     // the conversion thread
  void convert(Batch& b);
  void rethrow_locked();

  std::vector<RgbImage>& out_;
  VideoFrameSink* sink_;
  std::unique_ptr<Batch> gathering_;
  int64_t added_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;  // used by the conversion thread's jobs only

  std::mutex mu_;
  std::condition_variable cv_;  // queue changes, idle, errors
  std::deque<std::unique_ptr<Batch>> queue_;
  bool busy_ = false;      // the conversion thread holds a batch (or runs begin)
  bool stopping_ = false;  // destructor: drop what waits, end the thread
  std::exception_ptr error_;
  std::function<void()> begin_;  // the sink's begin, run first by the thread
  std::thread thread_;  // last: started after everything above is ready
};

}  // namespace vlm
