// The host media path of a video-file request, as Qwen2VLMediaLoader::load_video_file runs it
// after the fetch: decode_video (count pass, decode up to the last picked frame, RGB of the
// picked frames) with sample_frames' pick, then the per-frame pixel cap and qwen2vl_preprocess
// into the encoder's rows. One line per round: seconds of decode, preprocess and their sum.
// bench/video_host.sh runs it beside `ffmpeg -threads 2 -i FILE -f null -`.
// Run: build/bin/bench_video_host FILE [--model DIR] [--fps 2] [--rounds 3] [--threads N]
//   --model: a directory with the Qwen2-VL video processor settings (video_preprocessor_config.json;
//            default: Qwen2-VL-7B's, size {3136, 12845056})
//   --threads: decode and preprocessing threads (VideoLimits::decode_threads and the media pool;
//            0 = the machine's, the default); --decode-threads N: FFmpeg's alone
//   --no-skip 1: VideoLimits::skip_unpicked off (A/B)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "model/media/media_thread_pool.h"
#include "model/media/qwen2vl_preprocess.h"
#include "model/media/video_decode.h"
#include "model/media/video_sampling.h"

int main(int argc, char** argv) {
  using namespace vlm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [--model DIR] [--fps F] [--rounds N] [--threads N]\n", argv[0]);
    return 2;
  }
  const std::string file = argv[1];
  std::string model;
  double fps = 2.0;
  int rounds = 3, threads = 0, decode_threads = -1;
  bool skip = true;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--fps") fps = std::atof(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--decode-threads") decode_threads = std::atoi(argv[i + 1]);
    else if (a == "--no-skip") skip = std::atoi(argv[i + 1]) == 0;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Qwen2VLPreprocessConfig cfg;
  cfg.min_pixels = 3136;
  cfg.max_pixels = 12845056;  // Qwen2-VL-7B-Instruct's video processor
  VideoSamplingParams sp;
  if (!model.empty()) {
    cfg = Qwen2VLPreprocessConfig::load(model, true);
    sp = VideoSamplingParams::load(model);
  }
  sp.fps = fps;
  sp.num_frames.reset();
  sp.temporal_patch_size = cfg.temporal_patch_size;
  VideoLimits limits;
  limits.max_bytes = 1ll << 30;
  limits.timeout_ms = 600000;
  limits.decode_threads = decode_threads >= 0 ? decode_threads : threads;
  limits.skip_unpicked = skip;
  if (threads > 0) set_media_threads(threads);
  const int64_t total_pixels = 90316800;  // Qwen2VLMediaOptions::video_total_pixels
  for (int r = 0; r < rounds; ++r) {
    const double t0 = bench::now();
    FrameSample sample;
    const DecodedVideo video = decode_video(bytes, limits, [&](const VideoInfo& info) {
      sample = sample_frames(info.num_frames, info.fps, sp);
      return sample.indices;
    });
    const double t1 = bench::now();
    Qwen2VLPreprocessConfig c = cfg;
    c.max_pixels = std::min(c.max_pixels, video_frame_max_pixels(c.min_pixels, c.max_pixels, total_pixels,
                                                                 static_cast<int64_t>(video.frames.size()),
                                                                 c.temporal_patch_size));
    const VisionPatches p = qwen2vl_preprocess(video.frames, c);
    const double t2 = bench::now();
    std::printf("round %d: frames %lld of %lld, grid %dx%dx%d, decode %.3f s, preprocess %.3f s, host media %.3f s\n",
                r, static_cast<long long>(video.frames.size()), static_cast<long long>(video.info.num_frames),
                p.grid_thw[0], p.grid_thw[1], p.grid_thw[2], t1 - t0, t2 - t1, t2 - t0);
    std::fflush(stdout);
  }
  return 0;
}
