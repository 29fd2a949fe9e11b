#include "model/media/video_sampling.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/media/processor_config.h"

namespace vlm {

namespace {

RequestError bad(const std::string& msg) { return RequestError(400, "invalid_request_error", msg, "video"); }

// Python's round(): halves go to the even neighbour.
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

VideoSamplingParams VideoSamplingParams::from_json(const nlohmann::json& j, const std::string& source) {
  VideoSamplingParams p;
  auto positive = [&](const char* key) -> std::optional<double> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number() || !(j[key].get<double>() > 0))
      throw LoadError(fmt::format("{}: '{}' must be a positive number", source, key));
    return j[key].get<double>();
  };
  p.fps = positive("fps");
  if (auto v = positive("num_frames")) p.num_frames = static_cast<int64_t>(*v);
  if (auto v = positive("min_frames")) p.min_frames = static_cast<int64_t>(*v);
  if (auto v = positive("max_frames")) p.max_frames = static_cast<int64_t>(*v);
  if (auto v = positive("temporal_patch_size")) p.temporal_patch_size = static_cast<int>(*v);
  if (p.fps && p.num_frames) p.fps.reset();  // a checkpoint naming both: num_frames wins, as in HF
  return p;
}

VideoSamplingParams VideoSamplingParams::load(const std::string& model_dir) {
  // video_preprocessor_config.json, or transformers 5's processor_config.json "video_processor".
  const auto s = find_processor_settings(model_dir, "video_preprocessor_config.json", "video_processor");
  if (!s) return {};
  try {
    return from_json(s->json, s->source);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(s->source + ": " + e.what());
  }
}

FrameSample sample_frames(int64_t total_frames, double video_fps, const VideoSamplingParams& p) {
  if (total_frames < 1) throw bad("the video has no frames");
  if (p.fps && p.num_frames) throw bad("fps and num_frames are exclusive: give one");
  const int64_t tp = std::max(1, p.temporal_patch_size);
  int64_t n = 0;
  if (p.num_frames) {
    n = round_half_even(static_cast<double>(*p.num_frames) / static_cast<double>(tp)) * tp;
  } else {
    const double fps = p.fps.value_or(2.0);
    if (!(std::isfinite(fps) && fps > 0)) throw bad(fmt::format("fps must be positive, got {}", fps));
    if (!(std::isfinite(video_fps) && video_fps > 0))
      throw bad("the video's frame rate is unknown, so it cannot be sampled by fps; give num_frames");
    const double max_frames =
        std::floor(static_cast<double>(std::min(p.max_frames, total_frames)) / static_cast<double>(tp)) *
        static_cast<double>(tp);
    double want = static_cast<double>(total_frames) / video_fps * fps;
    want = std::min({std::max(want, static_cast<double>(p.min_frames)), max_frames, static_cast<double>(total_frames)});
    n = static_cast<int64_t>(std::floor(want / static_cast<double>(tp))) * tp;
  }
  if (n > total_frames)
    throw bad(fmt::format("cannot sample {} frames from a video of {} frames; ask for fewer", n, total_frames));
  if (n < 1)
    throw bad(fmt::format("a video of {} frame(s) gives no group of {} frames to sample", total_frames, tp));
  FrameSample s;
  const double step = static_cast<double>(total_frames) / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    // torch.arange's float32 result, truncated by .int().
    const int64_t idx = static_cast<int64_t>(static_cast<float>(static_cast<double>(i) * step));
    s.indices.push_back(std::min(idx, total_frames - 1));
    s.timestamps.push_back(video_fps > 0 ? static_cast<double>(s.indices.back()) / video_fps : 0.0);
  }
  s.sampled_fps = static_cast<double>(n) / static_cast<double>(total_frames) * video_fps;
  return s;
}

int64_t video_frame_max_pixels(int64_t min_pixels, int64_t max_pixels, int64_t total_pixels, int64_t num_frames,
                               int temporal_patch_size) {
  VLM_CHECK(num_frames > 0, "num_frames ", num_frames);
  const double budget = static_cast<double>(total_pixels) / static_cast<double>(num_frames) * temporal_patch_size;
  const double capped = std::max(std::min(static_cast<double>(max_pixels), budget),
                                 static_cast<double>(static_cast<int64_t>(static_cast<double>(min_pixels) * 1.05)));
  return static_cast<int64_t>(capped);
}

}  // namespace vlm
