// A video file's Qwen2-VL patch rows made while it decodes: a VideoFrameSink
// (model/media/video_decode.h) that resizes each picked frame as soon as it is converted to RGB
// and writes it into its temporal group's rows (qwen2vl_write_frame_rows), on the decoding's
// conversion threads. No RGB frame is kept: where decode_video + qwen2vl_preprocess held every
// picked frame at full size (462 MB for 768 frames of 448x448) and then walked them again, this
// holds one scratch frame per pool thread, resizes with a BicubicResizer per thread (taps and
// buffers made once), and the rows' pages are made present up front on the media pool
// (kernels/core/populated_vector.h).
//
// The rows are bit-identical to qwen2vl_preprocess(frames, config()) of the frames
// decode_video would have returned (tests/model/media/test_qwen2vl_video_rows.cpp).
//
// Use: Qwen2VLVideoRows rows(cfg, total_pixels); decode_video(bytes, limits, pick, rows);
// then rows.config() (the per-frame cap applied) and rows.take().
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "model/media/image_preprocess.h"
#include "model/media/qwen2vl_preprocess.h"
#include "model/media/video_decode.h"

namespace vlm {

class Qwen2VLVideoRows : public VideoFrameSink {
 public:
  // cfg: the video processor settings. total_pixels > 0: qwen-vl-utils' pixel budget over the
  // whole video; begin() caps cfg.max_pixels with video_frame_max_pixels(..., num_picked, ...)
  // (model/media/video_sampling.h), as the loader does. 0: no cap.
  Qwen2VLVideoRows(Qwen2VLPreprocessConfig cfg, int64_t total_pixels);

  // Throws RequestError (400) as qwen2vl_output_size does for the frame size (after the cap).
  void begin(const VideoInfo& info, int64_t num_picked) override;
  // rgb: info.width x info.height (decode_video checks every frame's size).
  void frame(int64_t k, const RgbImage& rgb) override;

  // After begin: the settings the rows are made with (max_pixels capped).
  const Qwen2VLPreprocessConfig& config() const { return cfg_; }
  // After decode_video returned normally: the rows [t * h * w, K] and grid (t, h, w), the last
  // frame repeated into the padded slots as qwen2vl_preprocess does. Leaves this empty.
  VisionPatches take();

 private:
  Qwen2VLPreprocessConfig cfg_;
  int64_t total_pixels_ = 0;
  Qwen2VLNormalizeTable lut_{};
  int out_h_ = 0, out_w_ = 0;
  int64_t num_frames_ = 0;   // picked frames
  int64_t group_size_ = 0;   // floats of one temporal group's rows
  VisionPatches out_;
  // Resizers with their output frames, one per concurrent frame() call, reused call to call.
  struct Resize {
    BicubicResizer resizer;
    RgbImage frame;
    Resize(int in_w, int in_h, int out_w, int out_h) : resizer(in_w, in_h, out_w, out_h) {}
  };
  int in_w_ = 0, in_h_ = 0;
  std::mutex free_mu_;
  std::vector<std::unique_ptr<Resize>> free_;
};

}  // namespace vlm
