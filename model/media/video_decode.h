// Video file bytes -> the RGB frames a sampler picks, decoded with FFmpeg's libraries (Debian's
// libavformat / libavcodec / libswscale).
//
// Safety (users send arbitrary files):
// - Input only from our own memory buffer (a custom AVIOContext); libav never opens a URL or a
//   file itself (io_open refuses every nested open, e.g. MOV data references).
// - Allow-lists: containers MP4/MOV (demuxer "mov"), WebM/Matroska ("matroska") and GIF ("gif");
//   codecs H.264 ("h264"), H.265 ("hevc"), VP8, VP9, AV1 (libdav1d) and GIF. Anything else is
//   refused by name before a decoder opens.
// - Limits before decoding: bytes; width * height from the headers (max_pixels, also given to
//   the decoder); duration from the headers (max_seconds); frames, counted by a demux-only pass
//   over the packets (max_frames), which also re-checks the duration from the timestamps.
// - A time limit (timeout_ms) over probing, demuxing and decoding, checked between packets and
//   by libav's interrupt callback.
// Every refusal is a RequestError (400, invalid_request_error) whose message says what was wrong.
//
// Speed: FFmpeg decodes with decode_threads frame + slice threads (the limits above hold the same:
// the deadline is checked between packets and by the interrupt callback). Decoding stops at the
// last picked frame. With skip_unpicked, packets of frames the sampler did not pick are sent with
// skip_frame = AVDISCARD_NONREF (the decoder drops them when nothing references them); frames
// are then matched to picks by pts (used only when every packet has a distinct pts). The picked
// frames are converted to RGB in batches on media_thread_pool() (model/media/media_thread_pool.h)
// by a conversion thread beside the decoding (model/media/video_rgb_converter.h); with a
// VideoFrameSink each frame goes on to the sink from there, none kept.
// The output is the same with any thread count and either skip setting
// (tests/model/media/test_video_decode_threads.cpp).
//
// Frames are counted as packets of the video stream (one per frame for these codecs; what
// transformers' readers report for them); the frame rate is the stream's average frame rate
// (avg_frame_rate), else frames / duration. Conversion to RGB is swscale's with SWS_BICUBIC, as
// OpenCV's reader does: within 2 levels of transformers' OpenCV frames on the committed clips
// (tests/model/media/test_video_decode.cpp), exact for GIF and lossless RGB H.264.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/media/image_decode.h"

namespace vlm {

struct VideoLimits {
  int64_t max_bytes = 64ll << 20;    // encoded size
  int64_t max_pixels = 64ll << 20;   // width * height of a frame
  double max_seconds = 600;          // duration
  int64_t max_frames = 7200;         // frames in the file (before sampling)
  int64_t timeout_ms = 30000;        // probing + demuxing + decoding
  int decode_threads = 0;            // FFmpeg's decoding threads; 0: default_media_threads()
  bool skip_unpicked = true;         // let the decoder skip non-reference frames not picked
};

struct VideoInfo {
  std::string container;  // demuxer: "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "gif"
  std::string codec;      // decoder: "h264", "hevc", "vp8", "vp9", "libdav1d", "gif"
  int width = 0;
  int height = 0;
  int64_t num_frames = 0;  // video packets in the file
  double fps = 0;          // average frame rate
  double duration_s = 0;   // from the timestamps of the packets
};

struct DecodedVideo {
  VideoInfo info;
  std::vector<int64_t> indices;  // [n] the picked frame indices, increasing
  std::vector<RgbImage> frames;  // [n] their RGB frames, all of one size
};

// Picks the frames to decode once the file's frames are counted: increasing indices in
// [0, info.num_frames). May throw RequestError.
using FramePicker = std::function<std::vector<int64_t>(const VideoInfo&)>;

// Takes the picked frames as they are decoded, instead of DecodedVideo::frames (a consumer that
// turns each frame into its own output at once, e.g. model/media/qwen2vl_video_rows.h, so that the
// RGB frames are never all held and the work overlaps the decoding).
class VideoFrameSink {
 public:
  virtual ~VideoFrameSink() = default;
  // Once, after the pick and before any frame: the file's info (frames are info.width x
  // info.height) and the number of picked frames. May throw (RequestError: decode_video passes
  // it on, no frame follows).
  virtual void begin(const VideoInfo& info, int64_t num_picked) = 0;
  // Picked frame k (0 <= k < num_picked: the k-th of the picks), 8-bit RGB; `rgb` is valid only
  // during the call. Called on media_thread_pool() threads, for different k at the same time and
  // in any order; once per k when decode_video returns normally (it throws when a frame is
  // missing). May throw: decode_video rethrows the first exception after the running calls end.
  virtual void frame(int64_t k, const RgbImage& rgb) = 0;
};

// Throws RequestError (400) for an empty, truncated or corrupt file, a container or codec not on
// the allow-lists, no video stream, a file over a limit, or a decode over the time limit.
DecodedVideo decode_video(std::span<const uint8_t> bytes, const VideoLimits& limits, const FramePicker& pick);
// The same, the picked frames handed to `sink` as they decode (same frames, same order of k as
// DecodedVideo::frames); the result's `frames` is empty. No call to the sink when nothing is
// picked (begin included) or when the file is refused before decoding.
DecodedVideo decode_video(std::span<const uint8_t> bytes, const VideoLimits& limits, const FramePicker& pick,
                          VideoFrameSink& sink);

}  // namespace vlm
