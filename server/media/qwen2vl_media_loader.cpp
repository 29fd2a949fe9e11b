#include "server/media/qwen2vl_media_loader.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/qwen2vl_video_rows.h"
#include "server/media/image_loader.h"

namespace vlm {

Qwen2VLMediaLoader::Qwen2VLMediaLoader(MediaFetchOptions fetch, ImageLimits limits, Qwen2VLMediaOptions options)
    : fetch_(std::move(fetch)), limits_(limits), options_(std::move(options)) {
  fetch_.max_bytes = std::min(fetch_.max_bytes, limits_.max_bytes);
  auto settings = [&](Hasher128& h, const Qwen2VLPreprocessConfig& c) {
    h.add(0x7177656e32766cull);  // "qwen2vl"
    for (int64_t v : {c.min_pixels, c.max_pixels, int64_t{c.patch_size}, int64_t{c.temporal_patch_size},
                      int64_t{c.merge_size}, int64_t{c.do_resize}, int64_t{c.do_rescale}, int64_t{c.do_normalize}})
      h.add(static_cast<uint64_t>(v));
    add_double(h, c.rescale_factor);
    for (float v : c.mean) add_double(h, v);
    for (float v : c.std) add_double(h, v);
    add_to_key(h, limits_);
  };
  Hasher128 h;
  settings(h, options_.image);
  preprocess_key_ = h.digest();
  Hasher128 v;
  settings(v, options_.video);
  v.add(static_cast<uint64_t>(options_.max_video_frames)).add(static_cast<uint64_t>(options_.video_total_pixels));
  video_preprocess_key_ = v.digest();
}

namespace {

MediaPixels to_media(VisionPatches&& p, Modality modality, const Qwen2VLPreprocessConfig& cfg) {
  MediaPixels m;
  m.data = std::move(p.pixels);
  m.grid_thw = p.grid_thw;
  m.height = p.grid_thw[1] * cfg.patch_size;
  m.width = p.grid_thw[2] * cfg.patch_size;
  m.modality = modality;
  return m;
}

// frames -> the Frames8 form when the GPU preprocesses and they fit its reservation, else rows.
MediaPixels make_media(std::vector<RgbImage> frames, Modality modality, const Qwen2VLPreprocessConfig& cfg,
                       bool gpu) {
  if (gpu) {
    const std::pair<int, int> hw = qwen2vl_output_size(frames, cfg);
    if (frames8_fit(frames[0].width, frames[0].height, hw.second, hw.first))
      return qwen2vl_frames8(std::move(frames), cfg, modality);
  }
  return to_media(qwen2vl_preprocess(frames, cfg), modality, cfg);
}

// The preprocessing's RequestErrors name no parameter: name the part's.
template <typename F>
auto with_param(const std::string& param, F&& f) {
  try {
    return f();
  } catch (const RequestError& e) {
    throw RequestError(e.status(), e.type(), e.what(), param);
  }
}

}  // namespace

MediaBytes Qwen2VLMediaLoader::fetch_image_bytes(const std::string& url, const std::string& param) const {
  return fetch_media(url, fetch_, param);
}

MediaPixels Qwen2VLMediaLoader::image_from_bytes(const MediaBytes& bytes, const std::string& param) const {
  RgbImage rgb = decode_fetched_image(bytes, limits_, param);
  MediaPixels m = with_param(param, [&] {
    std::vector<RgbImage> one;
    one.push_back(std::move(rgb));
    return make_media(std::move(one), Modality::Image, options_.image, options_.gpu_preprocess);
  });
  Hasher128 h;
  h.add(0x696d616765ull);  // "image"
  h.add(preprocess_key_);
  add_bytes(h, bytes);
  set_source_key(m, h);
  return m;
}

MediaPixels Qwen2VLMediaLoader::load_video(const std::vector<std::string>& frames, double fps,
                                           const std::string& param) const {
  if (!options_.accepts_video)
    throw RequestError(400, "invalid_request_error", "this model does not accept video input", param);
  Hasher128 h;
  h.add(0x7669646c697374ull);  // "vidlist"
  h.add(video_preprocess_key_);
  add_double(h, fps);
  std::vector<RgbImage> rgb = fetch_video_frames(frames, fps, options_.max_video_frames, fetch_, limits_, param,
                                                 [&](const MediaBytes& b) { add_bytes(h, b); });
  MediaPixels m = with_param(param, [&] {
    return make_media(std::move(rgb), Modality::Video, options_.video, options_.gpu_preprocess);
  });
  m.num_frames = static_cast<int32_t>(frames.size());
  m.second_per_grid = static_cast<float>(options_.video.temporal_patch_size / fps);
  set_source_key(m, h);
  return m;
}

MediaPixels Qwen2VLMediaLoader::load_video_file(const std::string& url, const VideoSamplingParams& sampling,
                                                const std::string& param) const {
  if (!options_.accepts_video)
    throw RequestError(400, "invalid_request_error", "this model does not accept video input", param);
  VideoSamplingParams p = sampling;
  p.temporal_patch_size = options_.video.temporal_patch_size;
  if (p.num_frames && *p.num_frames > options_.max_video_frames)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("num_frames is {}; at most {} frames of a video are allowed (--max-video-frames)",
                                   *p.num_frames, options_.max_video_frames),
                       param);
  p.max_frames = std::min<int64_t>(p.max_frames, options_.max_video_frames);
  MediaFetchOptions fetch = fetch_;
  fetch.max_bytes = options_.video_limits.max_bytes;
  const MediaBytes bytes = fetch_media(url, fetch, param);
  return with_param(param, [&] {
    FrameSample sample;
    auto pick = [&](const VideoInfo& info) {
      sample = sample_frames(info.num_frames, info.fps, p);
      return sample.indices;
    };
    const std::span<const uint8_t> file(reinterpret_cast<const uint8_t*>(bytes.data.data()), bytes.data.size());
    Qwen2VLPreprocessConfig cfg = options_.video;
    MediaPixels m;
    DecodedVideo video;
    if (options_.gpu_preprocess) {  // the frames kept for the GPU (or rows, when they do not fit it)
      video = decode_video(file, options_.video_limits, pick);
      cfg.max_pixels = std::min(cfg.max_pixels, video_frame_max_pixels(cfg.min_pixels, cfg.max_pixels,
                                                                       options_.video_total_pixels,
                                                                       static_cast<int64_t>(video.frames.size()),
                                                                       cfg.temporal_patch_size));
      m = make_media(std::move(video.frames), Modality::Video, cfg, true);
    } else {  // the CPU backend: the rows made while the file decodes, no frame kept
      Qwen2VLVideoRows rows(cfg, options_.video_total_pixels);
      video = decode_video(file, options_.video_limits, pick, rows);
      if (video.indices.empty())  // as qwen2vl_output_size refuses no frames (sample_frames picks >= 1)
        throw RequestError(400, "invalid_request_error", "a video needs at least one frame");
      cfg = rows.config();
      m = to_media(rows.take(), Modality::Video, cfg);
    }
    const auto n = static_cast<int32_t>(video.indices.size());
    m.num_frames = n;
    m.second_per_grid = static_cast<float>(cfg.temporal_patch_size / sample.sampled_fps);
    // The source key: the file's bytes, the settings, the per-frame cap and what was sampled.
    Hasher128 h;
    h.add(0x766964656f66696cull);  // "videofil"
    h.add(video_preprocess_key_);
    h.add(static_cast<uint64_t>(cfg.max_pixels));
    add_double(h, sample.sampled_fps);
    h.add(static_cast<uint64_t>(video.indices.size()));
    for (int64_t i : video.indices) h.add(static_cast<uint64_t>(i));
    add_bytes(h, bytes);
    set_source_key(m, h);
    return m;
  });
}

MediaTokens Qwen2VLMediaLoader::tokens(const MediaPixels& item) const {
  const Qwen2VLPreprocessConfig& cfg = item.modality == Modality::Video ? options_.video : options_.image;
  const int64_t mm = static_cast<int64_t>(cfg.merge_size) * cfg.merge_size;
  const auto& g = item.grid_thw;
  const int64_t per_frame = static_cast<int64_t>(g[1]) * g[2] / mm;
  return MediaTokens{item.modality, per_frame * g[0], per_frame};
}

}  // namespace vlm
