// Fuzzes model/video_decode (FFmpeg's demuxers and decoders behind our allow-lists, custom I/O
// and limits) and the frame sampler: arbitrary bytes as a video file, with limits small enough
// that a huge header is refused before decoding and a time limit under libFuzzer's timeout.
#include <cstdint>
#include <span>

#include "fuzz/fuzz_util.h"
#include "model/media/video_decode.h"
#include "model/media/video_sampling.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vlm::VideoLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_pixels = 1 << 20;
  limits.max_frames = 2000;
  limits.max_seconds = 3600;
  limits.timeout_ms = 2000;
  vlm::fuzz::run_expecting_clean_errors([&] {
    vlm::FrameSample sample;
    const vlm::DecodedVideo v =
        vlm::decode_video(std::span<const uint8_t>(data, size), limits, [&](const vlm::VideoInfo& info) {
          vlm::VideoSamplingParams p;
          p.max_frames = 8;
          sample = vlm::sample_frames(info.num_frames, info.fps, p);
          return sample.indices;
        });
    // The contract: one RGB frame per picked index, all of the stream's size, within the limit.
    if (v.frames.size() != v.indices.size() || v.indices != sample.indices) std::abort();
    for (const vlm::RgbImage& f : v.frames)
      if (f.width != v.info.width || f.height != v.info.height ||
          static_cast<int64_t>(f.width) * f.height > limits.max_pixels ||
          f.pixels.size() != static_cast<size_t>(f.width) * f.height * 3)
        std::abort();
  });
  return 0;
}
