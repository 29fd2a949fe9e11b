// The host media path of a video-file request, as Qwen2VLMediaLoader::load_video_file runs it
// after the fetch: decode_video (count pass, decode up to the last picked frame, RGB of the
// picked frames) with sample_frames' pick, then the per-frame pixel cap and qwen2vl_preprocess
// into the encoder's rows. One line per round: seconds of decode, preprocess and their sum, and of
// the prefix cache's media key (media_item_key: today's hash of the rows, or with --frames8 the
// source key over the file's bytes).
//   --frames8 1: the CUDA backend's form instead (Qwen2VLMediaLoader with gpu_preprocess): the
//            8-bit frames kept as decoded (qwen2vl_frames8: size and grid only, no rows made; the
//            GPU makes them), keyed by the file's bytes.
// bench/video_host.sh runs it beside `ffmpeg -threads 2 -i FILE -f null -`.
// Run: build/bin/bench_video_host FILE [--model DIR] [--fps 2] [--rounds 3] [--threads N]
//   --model: a directory with the Qwen2-VL video processor settings (video_preprocessor_config.json;
//            default: Qwen2-VL-7B's, size {3136, 12845056})
//   --threads: decode and preprocessing threads (VideoLimits::decode_threads and the media pool;
//            0 = the machine's, the default); --decode-threads N: FFmpeg's alone
//   --no-skip 1: VideoLimits::skip_unpicked off (A/B)
//   --fused 0: the rows made after decoding (decode_video's frames, then qwen2vl_preprocess), as
//            before Qwen2VLVideoRows; default 1: made while decoding (the loader's CPU path, so
//            "decode" holds nearly all the time and "preprocess" ~0)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "engine/scheduling/block_hash.h"
#include "model/media/media_pixels.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/media_thread_pool.h"
#include "model/media/qwen2vl_preprocess.h"
#include "model/media/qwen2vl_video_rows.h"
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
  bool skip = true, frames8 = false, fused = true;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model = argv[i + 1];
    else if (a == "--fps") fps = std::atof(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--decode-threads") decode_threads = std::atoi(argv[i + 1]);
    else if (a == "--no-skip") skip = std::atoi(argv[i + 1]) == 0;
    else if (a == "--frames8") frames8 = std::atoi(argv[i + 1]) != 0;
    else if (a == "--fused") fused = std::atoi(argv[i + 1]) != 0;
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
    auto picker = [&](const VideoInfo& info) {
      sample = sample_frames(info.num_frames, info.fps, sp);
      return sample.indices;
    };
    MediaPixels m;
    int64_t n = 0, total = 0;
    double t1 = 0;
    std::vector<int64_t> indices;
    if (fused && !frames8) {  // the loader's CPU path: rows made while decoding
      Qwen2VLVideoRows sink(cfg, total_pixels);
      DecodedVideo video = decode_video(bytes, limits, picker, sink);
      t1 = bench::now();
      VisionPatches p = sink.take();
      m.data = std::move(p.pixels);
      m.grid_thw = p.grid_thw;
      n = static_cast<int64_t>(video.indices.size());
      total = video.info.num_frames;
      indices = std::move(video.indices);
    } else {
      DecodedVideo video = decode_video(bytes, limits, picker);
      t1 = bench::now();
      Qwen2VLPreprocessConfig c = cfg;
      c.max_pixels = std::min(c.max_pixels, video_frame_max_pixels(c.min_pixels, c.max_pixels, total_pixels,
                                                                   static_cast<int64_t>(video.frames.size()),
                                                                   c.temporal_patch_size));
      n = static_cast<int64_t>(video.frames.size());
      total = video.info.num_frames;
      indices = video.indices;
      if (frames8) {
        m = qwen2vl_frames8(std::move(video.frames), c, Modality::Video);
      } else {
        VisionPatches p = qwen2vl_preprocess(video.frames, c);
        m.data = std::move(p.pixels);
        m.grid_thw = p.grid_thw;
      }
    }
    const double t2 = bench::now();
    if (frames8) {  // the loader's source key: the bytes (and settings, sampled indices: small)
      Hasher128 h;
      h.add_bytes(bytes.data(), bytes.size());
      for (int64_t i : indices) h.add(static_cast<uint64_t>(i));
      const BlockHash k = h.digest();
      m.has_source_key = true;
      m.source_key = {k.lo, k.hi};
    }
    const BlockHash key = media_item_key(m);
    const double t3 = bench::now();
    std::printf("round %d: frames %lld of %lld, grid %dx%dx%d, decode %.3f s, preprocess %.3f s, host media %.3f s, "
                "media key %.3f s (%s, key %016llx)\n",
                r, static_cast<long long>(n), static_cast<long long>(total), m.grid_thw[0], m.grid_thw[1],
                m.grid_thw[2], t1 - t0, t2 - t1, t2 - t0, t3 - t2, frames8 ? "8-bit frames" : "f32 rows",
                static_cast<unsigned long long>(key.lo));
    std::fflush(stdout);
  }
  return 0;
}
