#include "server/media/qwen3vl_media_loader.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/check.h"

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

Qwen2VLMediaOptions image_only(Qwen2VLMediaOptions o) {
  o.accepts_video = false;
  o.gpu_preprocess = false;
  return o;
}

}  // namespace

Qwen3VLMediaLoader::Qwen3VLMediaLoader(MediaFetchOptions fetch, ImageLimits limits, Qwen3VLMediaOptions options)
    : fetch_(fetch), limits_(limits), options_(std::move(options)),
      images_(fetch, limits, image_only(options_.image)) {}

MediaPixels Qwen3VLMediaLoader::video_item(std::vector<RgbImage> frames, std::span<const double> seconds,
                                           const std::string& param) const {
  return with_param(param, [&] {
    const VisionPatches p = qwen3vl_preprocess_video(frames, options_.video);
    MediaPixels m;
    m.data = p.pixels;
    m.grid_thw = p.grid_thw;
    m.height = p.grid_thw[1] * options_.video.base.patch_size;
    m.width = p.grid_thw[2] * options_.video.base.patch_size;
    m.modality = Modality::Video;
    m.num_frames = static_cast<int32_t>(frames.size());
    m.group_seconds = qwen3vl_group_timestamps(seconds, options_.video.base.temporal_patch_size);
    VLM_CHECK(static_cast<int32_t>(m.group_seconds.size()) == m.grid_thw[0], "{} timestamps for {} groups",
              m.group_seconds.size(), m.grid_thw[0]);
    return m;
  });
}

MediaPixels Qwen3VLMediaLoader::load_video(const std::vector<std::string>& frames, double fps,
                                           const std::string& param) const {
  std::vector<RgbImage> rgb = fetch_video_frames(frames, fps, options_.max_video_frames, fetch_, limits_, param);
  std::vector<double> seconds;
  for (size_t i = 0; i < rgb.size(); ++i) seconds.push_back(static_cast<double>(i) / fps);
  return video_item(std::move(rgb), seconds, param);
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
    return video_item(std::move(v.frames), seconds, param);
  });
}

MediaTokens Qwen3VLMediaLoader::tokens(const MediaPixels& item) const {
  const auto& g = item.grid_thw;
  const int64_t m = options_.image.image.merge_size;
  const int64_t per = static_cast<int64_t>(g[1]) * g[2] / (m * m);
  return {item.modality, per * g[0], per};
}

std::vector<MediaItemLoader::VideoGroup> Qwen3VLMediaLoader::video_groups(const MediaPixels& video) const {
  VLM_CHECK(static_cast<int32_t>(video.group_seconds.size()) == video.grid_thw[0],
            "a Qwen3-VL video of {} groups with {} timestamps", video.grid_thw[0], video.group_seconds.size());
  std::vector<VideoGroup> out;
  for (MediaPixels& m : qwen3vl_split_video(video, options_.video.base.temporal_patch_size)) {
    VideoGroup vg;
    vg.before = qwen3vl_timestamp_text(m.group_seconds.at(0)) + "<|vision_start|>";
    vg.after = "<|vision_end|>";
    vg.item = std::move(m);
    out.push_back(std::move(vg));
  }
  return out;
}

}  // namespace vlm
