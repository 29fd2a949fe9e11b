// The GPU frame preprocessing of a long video (CudaFramePreprocessor, issue 38): N frames of
// WxH 8-bit RGB (a moving pattern) in the Frames8 form with Qwen2-VL-7B's video settings and the
// per-frame cap of a 768-frame video, their patch rows made on the GPU in bf16 (upload of the
// 8-bit frames from pageable host memory, resize when the target differs, normalize, patchify),
// timed over the whole video (host wall time until the stream is idle), beside the CPU path
// (qwen2vl_preprocess to f32 rows, the media pool's threads) on the same frames.
// Run: bench_cuda_frame_preprocess [--frames 768] [--width 448] [--height 448] [--reps 3]
// Prints "frame_preprocess WxH->wxh frames N: gpu <ms> ms (<GB/s> of 8-bit frames), cpu <ms> ms".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/media/qwen2vl_frames.h"
#include "model/media/video_sampling.h"
#include "model/vision/cuda/cuda_frame_preprocessor.h"

using namespace vlm;

int main(int argc, char** argv) {
  int frames = 768, w = 448, h = 448, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--frames") frames = std::atoi(argv[i + 1]);
    else if (a == "--width") w = std::atoi(argv[i + 1]);
    else if (a == "--height") h = std::atoi(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
  }
  std::vector<RgbImage> video(static_cast<size_t>(frames));
  for (int f = 0; f < frames; ++f) {
    RgbImage& img = video[static_cast<size_t>(f)];
    img.width = w;
    img.height = h;
    img.pixels.resize(static_cast<size_t>(w) * h * 3);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c)
          img.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>((x * (c + 1) + y * 3 + f * 5) & 255);
  }
  Qwen2VLPreprocessConfig cfg;  // Qwen2-VL-7B's video processor
  cfg.min_pixels = 3136;
  cfg.max_pixels = 12845056;
  cfg.max_pixels = std::min(cfg.max_pixels, video_frame_max_pixels(cfg.min_pixels, cfg.max_pixels, 90316800, frames,
                                                                    cfg.temporal_patch_size));
  const auto t_cpu0 = std::chrono::steady_clock::now();
  const VisionPatches cpu = qwen2vl_preprocess(video, cfg);
  const double cpu_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_cpu0).count();
  const MediaPixels m = qwen2vl_frames8(std::move(video), cfg, Modality::Video);
  CudaFramePreprocessor pre;
  pre.reserve(cfg.temporal_patch_size);
  const int64_t P = static_cast<int64_t>(m.grid_thw[0]) * m.grid_thw[1] * m.grid_thw[2];
  cuda::DeviceBuffer rows(static_cast<size_t>(P * cfg.patch_dim()) * 2);
  cudaStream_t s = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreate(&s));
  std::vector<double> ms;
  for (int r = 0; r < reps + 1; ++r) {
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto t0 = std::chrono::steady_clock::now();
    pre.rows(m, 0, m.grid_thw[0], rows.get(), DType::BF16, s);
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
    if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double bytes = static_cast<double>(frames) * w * h * 3;
  std::printf("frame_preprocess %dx%d->%dx%d frames %d (%lld patches, rows %.2f GB bf16): gpu %.1f ms median of %d "
              "(%.1f GB/s of 8-bit frames; min %.1f, max %.1f), cpu f32 rows %.1f ms (%zu values)\n",
              w, h, m.width, m.height, frames, static_cast<long long>(P), static_cast<double>(P) * cfg.patch_dim() * 2 / 1e9,
              med, reps, bytes / med / 1e6, ms.front(), ms.back(), cpu_ms, cpu.pixels.size());
  VLM_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}
