#include "server/media/qwen3vl_media_loader.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "model/media/qwen2vl_frames.h"
#include "server/media/image_loader.h"

namespace vlm {

namespace {

// The preprocessing's RequestErrors name no parameter: name the part's.
template <typename F>
auto with_param(const std::string& param, F&& f) {
  try {
    return f();
  } catch (const RequestError& e) {
    throw RequestError(e.status(), e.type(), e.what(), param);
  }
}

Qwen2VLMediaOptions image_only(Qwen2VLMediaOptions o, bool gpu) {
  o.accepts_video = false;
  o.gpu_preprocess = gpu;
  return o;
}

}  // namespace

Qwen3VLMediaLoader::Qwen3VLMediaLoader(MediaFetchOptions fetch, ImageLimits limits, Qwen3VLMediaOptions options)
    : fetch_(fetch), limits_(limits), options_(std::move(options)),
      images_(fetch, limits, image_only(options_.image, options_.gpu_preprocess)) {
  // Everything that changes a video's rows beside its bytes and sampled frames.
  const Qwen3VLVideoConfig& v = options_.video;
  const Qwen2VLPreprocessConfig& c = v.base;
  Hasher128 h;
  h.add(0x7177656e33766cull);  // "qwen3vl"
  for (int64_t x : {c.min_pixels, c.max_pixels, int64_t{c.patch_size}, int64_t{c.temporal_patch_size},
                    int64_t{c.merge_size}, int64_t{c.do_resize}, int64_t{c.do_rescale}, int64_t{c.do_normalize},
                    int64_t{v.cap_pixels_per_frame}, v.max_video_tokens, int64_t{v.min_frames}, int64_t{v.max_frames},
                    int64_t{options_.max_video_frames}})
    h.add(static_cast<uint64_t>(x));
  add_double(h, c.rescale_factor);
  for (float x : c.mean) add_double(h, x);
  for (float x : c.std) add_double(h, x);
  add_double(h, v.fps);
  add_to_key(h, limits_);
  video_preprocess_key_ = h.digest();
}

MediaPixels Qwen3VLMediaLoader::video_item(std::vector<RgbImage> frames, std::span<const double> seconds,
                                           const std::string& param) const {
  return with_param(param, [&] {
    const auto n = static_cast<int32_t>(frames.size());
    MediaPixels m;
    bool f8 = false;
    if (options_.gpu_preprocess) {  // the frames kept for the GPU (or rows, when they do not fit it)
      const std::pair<int, int> hw = qwen3vl_video_target(frames, options_.video);
      f8 = frames8_fit(frames[0].width, frames[0].height, hw.second, hw.first);
      if (f8) m = qwen3vl_video_frames8(std::move(frames), options_.video);
    }
    if (!f8) {
      VisionPatches p = qwen3vl_preprocess_video(frames, options_.video);
      m.data = std::move(p.pixels);
      m.grid_thw = p.grid_thw;
      m.height = p.grid_thw[1] * options_.video.base.patch_size;
      m.width = p.grid_thw[2] * options_.video.base.patch_size;
      m.modality = Modality::Video;
    }
    m.num_frames = n;
    m.group_seconds = qwen3vl_group_timestamps(seconds, options_.video.base.temporal_patch_size);
    VLM_CHECK(static_cast<int32_t>(m.group_seconds.size()) == m.grid_thw[0], "{} timestamps for {} groups",
              m.group_seconds.size(), m.grid_thw[0]);
    return m;
  });
}

MediaPixels Qwen3VLMediaLoader::load_video(const std::vector<std::string>& frames, double fps,
                                           const std::string& param) const {
  Hasher128 h;
  h.add(0x7669646c697374ull);  // "vidlist"
  h.add(video_preprocess_key_);
  add_double(h, fps);
  std::vector<RgbImage> rgb = fetch_video_frames(frames, fps, options_.max_video_frames, fetch_, limits_, param,
                                                 [&](const MediaBytes& b) { add_bytes(h, b); });
  std::vector<double> seconds;
  for (size_t i = 0; i < rgb.size(); ++i) seconds.push_back(static_cast<double>(i) / fps);
  MediaPixels m = video_item(std::move(rgb), seconds, param);
  set_source_key(m, h);
  return m;
}

VideoSamplingParams Qwen3VLMediaLoader::default_sampling() const {
  VideoSamplingParams p;
  p.fps = options_.video.fps;
  p.min_frames = options_.video.min_frames;
  p.max_frames = options_.video.max_frames;
  p.temporal_patch_size = options_.video.base.temporal_patch_size;
  return p;
}

MediaPixels Qwen3VLMediaLoader::load_video_file(const std::string& url, const VideoSamplingParams& sampling,
                                                const std::string& param) const {
  if (sampling.num_frames && *sampling.num_frames > options_.max_video_frames)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("num_frames is {}; at most {} frames of a video are allowed (--max-video-frames)",
                                   *sampling.num_frames, options_.max_video_frames),
                       param);
  MediaFetchOptions fetch = fetch_;
  fetch.max_bytes = options_.video_limits.max_bytes;
  const MediaBytes bytes = fetch_media(url, fetch, param);
  return with_param(param, [&] {
    double video_fps = 0;
    auto pick = [&](const VideoInfo& info) {
      video_fps = info.fps;
      const int64_t max_frames = std::min<int64_t>(sampling.max_frames, options_.max_video_frames);
      if (sampling.num_frames) {  // sample_frames with num_frames: linspace over the file, no fps
        if (*sampling.num_frames > info.num_frames)
          throw RequestError(400, "invalid_request_error",
                             fmt::format("num_frames {} is more than the video's {} frames", *sampling.num_frames,
                                         info.num_frames));
        return qwen3vl_linspace_indices(info.num_frames, *sampling.num_frames);
      }
      return qwen3vl_sample_indices(info.num_frames, info.fps, sampling.fps.value_or(options_.video.fps),
                                    sampling.min_frames, max_frames);
    };
    const std::span<const uint8_t> file(reinterpret_cast<const uint8_t*>(bytes.data.data()), bytes.data.size());
    DecodedVideo v = decode_video(file, options_.video_limits, pick);
    std::vector<double> seconds;
    for (int64_t i : v.indices) seconds.push_back(static_cast<double>(i) / video_fps);
    MediaPixels m = video_item(std::move(v.frames), seconds, param);
    // The source key: the file's bytes, the settings, the file's rate and what was sampled.
    Hasher128 h;
    h.add(0x766964656f66696cull);  // "videofil"
    h.add(video_preprocess_key_);
    add_double(h, video_fps);
    h.add(static_cast<uint64_t>(v.indices.size()));
    for (int64_t i : v.indices) h.add(static_cast<uint64_t>(i));
    add_bytes(h, bytes);
    set_source_key(m, h);
    return m;
  });
}

MediaTokens Qwen3VLMediaLoader::tokens(const MediaPixels& item) const {
  const auto& g = item.grid_thw;
  const int64_t m = options_.image.image.merge_size;
  const int64_t per = static_cast<int64_t>(g[1]) * g[2] / (m * m);
  return {item.modality, per * g[0], per};
}

std::vector<MediaItemLoader::VideoGroup> Qwen3VLMediaLoader::video_groups(MediaPixels& video) const {
  VLM_CHECK(static_cast<int32_t>(video.group_seconds.size()) == video.grid_thw[0],
            "a Qwen3-VL video of {} groups with {} timestamps", video.grid_thw[0], video.group_seconds.size());
  const bool keyed = video.has_source_key;
  const std::array<uint64_t, 2> key = video.source_key;
  std::vector<VideoGroup> out;
  for (MediaPixels& m : qwen3vl_split_video(std::move(video), options_.video.base.temporal_patch_size)) {
    if (keyed) {  // the group's identity: the video's and which group (its rows follow from both)
      Hasher128 h;
      h.add(0x67726f7570ull);  // "group"
      h.add(key[0]).add(key[1]).add(static_cast<uint64_t>(m.video_group));
      set_source_key(m, h);
    }
    VideoGroup vg;
    vg.before = qwen3vl_timestamp_text(m.group_seconds.at(0)) + "<|vision_start|>";
    vg.after = "<|vision_end|>";
    vg.item = std::move(m);
    out.push_back(std::move(vg));
  }
  return out;
}

}  // namespace vlm
