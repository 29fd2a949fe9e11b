// The host media path of a Qwen3-VL video-file request, as Qwen3VLMediaLoader::load_video_file and
// video_groups run it after the fetch: decode_video at the frames Qwen3VLVideoProcessor.sample_frames
// picks, then either
//   rows (the CPU backend's form, and the CUDA backend's before the Frames8 form): Qwen3-VL's resize
//     and qwen2vl_preprocess into f32 rows (qwen3vl_preprocess_video), the video split into its
//     temporal groups (copies of their rows), each group keyed for the prefix cache by its rows
//     (media_item_key without a source key: the pre-Frames8 loader set none for Qwen3-VL videos), or
//   --frames8 1 (the CUDA backend's form): the 8-bit frames kept (qwen3vl_video_frames8: the size and
//     grid only, no rows; the GPU makes them), the groups split with their frames moved, each keyed
//     by the source key (the file's bytes and sampled indices, then the group's index).
// One line per round: seconds of decode, preprocess (rows or the Frames8 item), split, keys and the
// sum (the host media work before the engine).
// Run: build/bin/bench_qwen3vl_video_host FILE [--fps 2.5] [--max-frames 1000] [--rounds 3]
//      [--threads N] [--frames8 0|1]
//   Settings: Qwen3-VL's video processor with the 448x448 frames kept (bench/cuda/make_qwen3vl_8b_random.py:
//   size {4096, 1000 * 448 * 448 + 1}, patch 16, mean/std 0.5).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "engine/scheduling/block_hash.h"
#include "model/media/media_pixels.h"
#include "model/media/media_thread_pool.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/qwen3vl_video.h"
#include "model/media/video_decode.h"

int main(int argc, char** argv) {
  using namespace vlm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [--fps F] [--max-frames N] [--rounds N] [--threads N] [--frames8 0|1]\n",
                 argv[0]);
    return 2;
  }
  const std::string file = argv[1];
  double fps = 2.5;
  int rounds = 3, threads = 0, max_frames = 1000;
  bool frames8 = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--fps") fps = std::atof(argv[i + 1]);
    else if (a == "--max-frames") max_frames = std::atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--frames8") frames8 = std::atoi(argv[i + 1]) != 0;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Qwen3VLVideoConfig cfg;
  cfg.base.patch_size = 16;
  cfg.base.min_pixels = 4096;
  cfg.base.max_pixels = int64_t{1000} * 448 * 448 + 1;
  cfg.base.mean = {0.5f, 0.5f, 0.5f};
  cfg.base.std = {0.5f, 0.5f, 0.5f};
  cfg.max_frames = max_frames;
  VideoLimits limits;
  limits.max_bytes = 1ll << 30;
  limits.max_frames = 1 << 20;
  limits.timeout_ms = 600000;
  limits.decode_threads = threads;
  if (threads > 0) set_media_threads(threads);
  for (int r = 0; r < rounds; ++r) {
    const double t0 = bench::now();
    DecodedVideo video = decode_video(bytes, limits, [&](const VideoInfo& info) {
      return qwen3vl_sample_indices(info.num_frames, info.fps, fps, cfg.min_frames, cfg.max_frames);
    });
    const double t1 = bench::now();
    const auto n = static_cast<int32_t>(video.frames.size());
    MediaPixels m;
    if (frames8) {
      m = qwen3vl_video_frames8(std::move(video.frames), cfg);
      Hasher128 h;  // the loader's source key: the bytes and the sampled indices (settings: small)
      h.add_bytes(bytes.data(), bytes.size());
      for (int64_t i : video.indices) h.add(static_cast<uint64_t>(i));
      const BlockHash k = h.digest();
      m.has_source_key = true;
      m.source_key = {k.lo, k.hi};
    } else {
      VisionPatches p = qwen3vl_preprocess_video(video.frames, cfg);
      m.data = std::move(p.pixels);
      m.grid_thw = p.grid_thw;
      m.height = p.grid_thw[1] * 16;
      m.width = p.grid_thw[2] * 16;
      m.modality = Modality::Video;
    }
    m.num_frames = n;
    const bool keyed = m.has_source_key;
    const std::array<uint64_t, 2> vkey = m.source_key;
    const std::array<int32_t, 3> grid = m.grid_thw;
    const double t2 = bench::now();
    std::vector<MediaPixels> groups = qwen3vl_split_video(std::move(m), 2);
    const double t3 = bench::now();
    uint64_t x = 0;
    for (MediaPixels& g : groups) {
      if (keyed) {  // as Qwen3VLMediaLoader::video_groups
        Hasher128 h;
        h.add(vkey[0]).add(vkey[1]).add(static_cast<uint64_t>(g.video_group));
        const BlockHash k = h.digest();
        g.has_source_key = true;
        g.source_key = {k.lo, k.hi};
      }
      x ^= media_item_key(g).lo;
    }
    const double t4 = bench::now();
    std::printf("round %d: frames %d, grid %dx%dx%d, %zu groups; decode %.3f s, %s %.3f s, split %.3f s, keys %.3f s; "
                "host media %.3f s (keys %016llx)\n",
                r, n, grid[0], grid[1], grid[2], groups.size(), t1 - t0, frames8 ? "frames8 item" : "f32 rows",
                t2 - t1, t3 - t2, t4 - t3, t4 - t0, static_cast<unsigned long long>(x));
    std::fflush(stdout);
  }
  return 0;
}
