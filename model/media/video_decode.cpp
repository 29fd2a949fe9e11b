#include "model/media/video_decode.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

#include "kernels/core/check.h"
#include "model/media/media_thread_pool.h"
#include "model/media/video_rgb_converter.h"

namespace vlm {

namespace {

RequestError bad(const std::string& msg) { return RequestError(400, "invalid_request_error", msg, "video"); }

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

// Allow-lists: demuxers by the first name of their list, codecs -> the decoder we open.
constexpr std::array<const char*, 3> kContainers{"mov", "matroska", "gif"};
constexpr const char* kContainerWhitelist = "mov,matroska,gif";
constexpr const char* kCodecWhitelist = "h264,hevc,vp8,vp9,libdav1d,gif";
struct AllowedCodec {
  AVCodecID id;
  const char* decoder;
};
constexpr std::array<AllowedCodec, 6> kCodecs{{{AV_CODEC_ID_H264, "h264"},
                                               {AV_CODEC_ID_HEVC, "hevc"},
                                               {AV_CODEC_ID_VP8, "vp8"},
                                               {AV_CODEC_ID_VP9, "vp9"},
                                               {AV_CODEC_ID_AV1, "libdav1d"},
                                               {AV_CODEC_ID_GIF, "gif"}}};
constexpr const char* kAccepted = "MP4/MOV, WebM/Matroska or GIF with H.264, H.265, VP8, VP9, AV1 or GIF video";

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point end;
  int64_t limit_ms = 0;
  bool passed() const { return Clock::now() >= end; }
  void check() const {
    if (passed()) throw bad(fmt::format("decoding the video took over the time limit ({} ms)", limit_ms));
  }
};

// The custom I/O: reads and seeks within our buffer only.
struct MemoryInput {
  const uint8_t* data = nullptr;
  int64_t size = 0;
  int64_t pos = 0;
};

int read_packet(void* opaque, uint8_t* buf, int n) {
  auto* in = static_cast<MemoryInput*>(opaque);
  const int64_t left = in->size - in->pos;
  if (left <= 0) return AVERROR_EOF;
  const int take = static_cast<int>(std::min<int64_t>(left, n));
  std::memcpy(buf, in->data + in->pos, static_cast<size_t>(take));
  in->pos += take;
  return take;
}

int64_t seek_input(void* opaque, int64_t offset, int whence) {
  auto* in = static_cast<MemoryInput*>(opaque);
  if (whence & AVSEEK_SIZE) return in->size;
  int64_t to = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: to = offset; break;
    case SEEK_CUR: to = in->pos + offset; break;
    case SEEK_END: to = in->size + offset; break;
    default: return AVERROR(EINVAL);
  }
  if (to < 0 || to > in->size) return AVERROR(EINVAL);
  in->pos = to;
  return to;
}

int refuse_io_open(AVFormatContext*, AVIOContext**, const char* url, int, AVDictionary**) {
  return AVERROR(EPERM);  // no nested files or URLs (MOV data references, playlists, ...)
}

int interrupt(void* opaque) { return static_cast<const Deadline*>(opaque)->passed() ? 1 : 0; }

void quiet_libav() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

struct IoDeleter {
  void operator()(AVIOContext* io) const {
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
struct FormatDeleter {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }  // leaves our pb alone
};

// An opened container over the bytes, with its video stream chosen and checked.
class Demuxer {
 public:
  Demuxer(std::span<const uint8_t> bytes, const VideoLimits& limits, const Deadline& deadline) {
    input_.data = bytes.data();
    input_.size = static_cast<int64_t>(bytes.size());
    constexpr int kBuffer = 1 << 15;
    auto* buf = static_cast<uint8_t*>(av_malloc(kBuffer));
    if (!buf) throw std::bad_alloc();
    io_.reset(avio_alloc_context(buf, kBuffer, 0, &input_, read_packet, nullptr, seek_input));
    if (!io_) {
      av_free(buf);
      throw std::bad_alloc();
    }
    const AVInputFormat* format = nullptr;
    int err = av_probe_input_buffer2(io_.get(), &format, "", nullptr, 0, 1 << 20);
    if (err < 0 || !format) throw bad("the video is not in a container we can read (" + std::string(kAccepted) + ")");
    const std::string name = format->name;
    const std::string first = name.substr(0, name.find(','));
    if (std::find(kContainers.begin(), kContainers.end(), first) == kContainers.end())
      throw bad(fmt::format("video container '{}' is not accepted; send {}", name, kAccepted));
    AVFormatContext* raw = avformat_alloc_context();
    if (!raw) throw std::bad_alloc();
    raw->pb = io_.get();
    raw->flags |= AVFMT_FLAG_CUSTOM_IO;
    raw->io_open = refuse_io_open;
    raw->interrupt_callback = {interrupt, const_cast<Deadline*>(&deadline)};
    raw->max_streams = 64;
    AVDictionary* opts = nullptr;
    av_dict_set(&opts, "format_whitelist", kContainerWhitelist, 0);
    av_dict_set(&opts, "codec_whitelist", kCodecWhitelist, 0);
    av_dict_set(&opts, "protocol_whitelist", "none", 0);
    err = avformat_open_input(&raw, nullptr, format, &opts);  // frees raw on failure
    av_dict_free(&opts);
    if (err < 0) {
      deadline.check();
      throw bad("the video file is truncated or corrupt (" + av_error(err) + ")");
    }
    fmt_.reset(raw);
    deadline.check();
    stream_ = av_find_best_stream(raw, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream_ < 0) throw bad("the file has no video stream (audio only?)");
    const AVCodecParameters* par = raw->streams[stream_]->codecpar;
    for (const AllowedCodec& c : kCodecs)
      if (c.id == par->codec_id) decoder_ = avcodec_find_decoder_by_name(c.decoder);
    if (!decoder_)
      throw bad(fmt::format("video codec '{}' is not accepted; send {}", avcodec_get_name(par->codec_id), kAccepted));
    if (par->width <= 0 || par->height <= 0) throw bad("the video's headers give no frame size");
    if (static_cast<int64_t>(par->width) * par->height > limits.max_pixels)
      throw bad(fmt::format("video frames are {}x{} pixels; at most {} pixels a frame are allowed", par->width,
                            par->height, limits.max_pixels));
    const double header_seconds = raw->duration != AV_NOPTS_VALUE ? raw->duration / double(AV_TIME_BASE) : 0.0;
    if (header_seconds > limits.max_seconds)
      throw bad(fmt::format("the video lasts {:.0f} s; at most {:.0f} s are allowed", header_seconds,
                            limits.max_seconds));
    for (unsigned i = 0; i < raw->nb_streams; ++i)
      if (static_cast<int>(i) != stream_) raw->streams[i]->discard = AVDISCARD_ALL;
  }
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;

  // The next packet of the video stream into `pkt`; false at the end. Throws for a read error
  // that is not the end of the file.
  bool next(AVPacket* pkt, const Deadline& deadline) {
    for (;;) {
      deadline.check();
      const int err = av_read_frame(fmt_.get(), pkt);
      if (err == AVERROR_EOF) return false;
      deadline.check();
      if (err < 0) throw bad("the video file is truncated or corrupt (" + av_error(err) + ")");
      if (pkt->stream_index == stream_) return true;
      av_packet_unref(pkt);
    }
  }

  AVFormatContext* format() const { return fmt_.get(); }
  AVStream* stream() const { return fmt_->streams[stream_]; }
  const AVCodec* decoder() const { return decoder_; }

 private:
  MemoryInput input_;
  std::unique_ptr<AVIOContext, IoDeleter> io_;        // declared before fmt_: closed after it
  std::unique_ptr<AVFormatContext, FormatDeleter> fmt_;
  int stream_ = -1;
  const AVCodec* decoder_ = nullptr;
};

struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct CodecDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;

PacketPtr new_packet() {
  PacketPtr p(av_packet_alloc());
  if (!p) throw std::bad_alloc();
  return p;
}

// Pass 1, demuxing only: frames, duration and rate; the frame limit applies as packets arrive.
// `pts` gets every packet's presentation time in decode order (AV_NOPTS_VALUE where absent).
VideoInfo count_frames(Demuxer& dm, const VideoLimits& limits, const Deadline& deadline, std::vector<int64_t>& pts) {
  VideoInfo info;
  info.container = dm.format()->iformat->name;
  info.codec = dm.decoder()->name;
  info.width = dm.stream()->codecpar->width;
  info.height = dm.stream()->codecpar->height;
  const AVRational tb = dm.stream()->time_base;
  int64_t first = AV_NOPTS_VALUE, end = AV_NOPTS_VALUE;
  PacketPtr pkt = new_packet();
  while (dm.next(pkt.get(), deadline)) {
    if (++info.num_frames > limits.max_frames)
      throw bad(fmt::format("the video has more than {} frames; at most {} are allowed", limits.max_frames,
                            limits.max_frames));
    pts.push_back(pkt->pts);
    const int64_t ts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
    if (ts != AV_NOPTS_VALUE) {
      if (first == AV_NOPTS_VALUE || ts < first) first = ts;
      const int64_t e = ts + std::max<int64_t>(pkt->duration, 0);
      if (end == AV_NOPTS_VALUE || e > end) end = e;
    }
    av_packet_unref(pkt.get());
  }
  if (info.num_frames == 0) throw bad("the video stream has no frames");
  const int64_t listed = dm.stream()->nb_frames;
  if (listed > info.num_frames)
    throw bad(fmt::format("the video file is truncated: its header lists {} frames, the file holds {}", listed,
                          info.num_frames));
  if (first != AV_NOPTS_VALUE && end > first) info.duration_s = static_cast<double>(end - first) * av_q2d(tb);
  if (info.duration_s > limits.max_seconds)
    throw bad(fmt::format("the video lasts {:.0f} s; at most {:.0f} s are allowed", info.duration_s,
                          limits.max_seconds));
  const AVRational avg = dm.stream()->avg_frame_rate;
  if (avg.num > 0 && avg.den > 0) info.fps = av_q2d(avg);
  else if (info.duration_s > 0) info.fps = static_cast<double>(info.num_frames) / info.duration_s;
  return info;
}

using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;

// Pass 2: decodes every frame up to the last picked one, converting the picked ones.
// Frames are identified by their presentation order: by their pts among the packets' (`pts`, all
// present and distinct), else by counting the decoder's output. With pts, packets of frames the
// sampler does not pick are sent with skip_frame = AVDISCARD_NONREF, so the decoder skips the
// non-reference ones (nothing depends on them; the reference ones are still decoded).
void decode_picked(Demuxer& dm, const VideoLimits& limits, const Deadline& deadline, std::vector<int64_t> pts,
                   DecodedVideo& out, VideoFrameSink* sink) {
  std::unique_ptr<AVCodecContext, CodecDeleter> ctx(avcodec_alloc_context3(dm.decoder()));
  if (!ctx) throw std::bad_alloc();
  int err = avcodec_parameters_to_context(ctx.get(), dm.stream()->codecpar);
  if (err < 0) throw bad("the video's codec parameters are invalid (" + av_error(err) + ")");
  ctx->thread_count = limits.decode_threads > 0 ? limits.decode_threads : default_media_threads();
  ctx->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "codec_whitelist", kCodecWhitelist, 0);
  av_dict_set_int(&opts, "max_pixels", limits.max_pixels, 0);
  err = avcodec_open2(ctx.get(), dm.decoder(), &opts);
  av_dict_free(&opts);
  if (err < 0) throw bad("the video decoder refused the stream (" + av_error(err) + ")");

  // Presentation order by pts: sorted[i] is frame i's pts; picked_pts the picked frames'.
  std::vector<int64_t> sorted = pts;
  std::sort(sorted.begin(), sorted.end());
  const bool by_pts = !sorted.empty() && sorted.front() != AV_NOPTS_VALUE &&
                      std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  std::vector<int64_t> picked_pts;
  if (by_pts)
    for (int64_t i : out.indices) picked_pts.push_back(sorted[static_cast<size_t>(i)]);
  const bool skip = by_pts && limits.skip_unpicked;

  FramePtr frame(av_frame_alloc());
  if (!frame) throw std::bad_alloc();
  VideoRgbConverter rgb(out.frames, sink, out.info, static_cast<int64_t>(out.indices.size()));
  PacketPtr pkt = new_packet();
  int64_t decoded = 0;  // frames the decoder returned
  size_t want = 0;      // next entry of out.indices
  auto drain = [&] {
    for (;;) {
      const int r = avcodec_receive_frame(ctx.get(), frame.get());
      if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
      if (r < 0) throw bad(fmt::format("the video is corrupt at frame {} ({})", decoded, av_error(r)));
      if (frame->width != out.info.width || frame->height != out.info.height)
        throw bad(fmt::format("video frame {} is {}x{} pixels, the stream says {}x{}", decoded, frame->width,
                              frame->height, out.info.width, out.info.height));
      if (by_pts && frame->pts != AV_NOPTS_VALUE) {
        // Every pick up to this frame's pts: a picked frame the decoder dropped (a corrupt
        // stream) takes the next frame that decoded, as counting the output would.
        while (want < picked_pts.size() && picked_pts[want] <= frame->pts) {
          rgb.add(frame.get());
          ++want;
        }
      } else if (want < out.indices.size() && out.indices[want] == decoded) {
        rgb.add(frame.get());
        ++want;
      }
      ++decoded;
      av_frame_unref(frame.get());
    }
  };
  while (want < out.indices.size() && dm.next(pkt.get(), deadline)) {
    if (skip) {
      const bool picked = std::binary_search(picked_pts.begin(), picked_pts.end(), pkt->pts);
      ctx->skip_frame = picked ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
    }
    err = avcodec_send_packet(ctx.get(), pkt.get());
    av_packet_unref(pkt.get());
    if (err < 0 && err != AVERROR(EAGAIN))
      throw bad(fmt::format("the video is corrupt at frame {} ({})", decoded, av_error(err)));
    drain();
  }
  if (want < out.indices.size()) {
    ctx->skip_frame = AVDISCARD_DEFAULT;
    avcodec_send_packet(ctx.get(), nullptr);  // flush the decoder's delayed frames
    drain();
  }
  rgb.finish();
  if (want < out.indices.size())
    throw bad(fmt::format("the video ends after {} decodable frames; its file lists {}", decoded,
                          out.info.num_frames));
}

}  // namespace

namespace {

DecodedVideo decode(std::span<const uint8_t> bytes, const VideoLimits& limits, const FramePicker& pick,
                    VideoFrameSink* sink) {
  if (bytes.empty()) throw bad("the video file is empty");
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes)
    throw bad(fmt::format("the video file has {} bytes; at most {} are allowed", bytes.size(), limits.max_bytes));
  quiet_libav();
  const Deadline deadline{Clock::now() + std::chrono::milliseconds(limits.timeout_ms), limits.timeout_ms};
  DecodedVideo out;
  std::vector<int64_t> pts;  // [num_frames] the packets' pts, decode order
  {
    Demuxer dm(bytes, limits, deadline);
    out.info = count_frames(dm, limits, deadline, pts);
  }
  out.indices = pick(out.info);
  for (size_t i = 0; i < out.indices.size(); ++i)
    VLM_CHECK(out.indices[i] >= 0 && out.indices[i] < out.info.num_frames && (i == 0 || out.indices[i] > out.indices[i - 1]),
              "picked frame ", out.indices[i], " of ", out.info.num_frames);
  if (out.indices.empty()) return out;
  Demuxer dm(bytes, limits, deadline);
  decode_picked(dm, limits, deadline, std::move(pts), out, sink);
  return out;
}

}  // namespace

DecodedVideo decode_video(std::span<const uint8_t> bytes, const VideoLimits& limits, const FramePicker& pick) {
  return decode(bytes, limits, pick, nullptr);
}

DecodedVideo decode_video(std::span<const uint8_t> bytes, const VideoLimits& limits, const FramePicker& pick,
                          VideoFrameSink& sink) {
  return decode(bytes, limits, pick, &sink);
}

}  // namespace vlm
