// Vision encode time of the Qwen2-VL-7B vision tower on the GPU (CudaQwen2Vision, bf16 tensor
// cores, random bf16 weights: depth 32, width 1280, 16 heads, MLP 5120, merger to 3584) on the
// issue's shapes: a 448x448 image (grid 1x32x32: 1024 patches), 8 frames (4x32x32) and 64 frames
// (32x32x32) of 448x448. Times per shape: run() alone over pixels already on the GPU (the peer's
// case, "resident"), and whole encode() calls as the server makes them (pixel rows uploaded from
// pageable host memory included, group by group of whole frames overlapped with the tower:
// "with_upload_g<group patches>"), each until the stream is idle: median of --reps after two warm-ups. bench/cuda/hf_vision_encode.py times transformers on the same shapes (the
// peer, in the same run: bench/cuda/run_vision_bench.sh). Prints "vision <shape> resident|with_upload_g<N> <ms> ms".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/vision/cuda/cuda_qwen2_vision.h"

using namespace vlm;

namespace {

// Uniform values in [-a, a] (norm weights: 1 +- a) as bf16, from a 64-bit LCG (fast for 630M values).
TensorView random_bf16(const std::string& name, const Shape& shape, std::map<std::string, Tensor>& store) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  static uint64_t s = 88172645463325252ULL;
  const bool norm_w = (name.find("norm") != std::string::npos || name.find("ln_q") != std::string::npos) &&
                      name.find("weight") != std::string::npos;
  const float a = 0.03f;
  auto* p = static_cast<uint16_t*>(t.data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    const float u = (static_cast<float>(s >> 40) / 16777216.0f * 2.0f - 1.0f) * a + (norm_w ? 1.0f : 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &u, 4);
    p[i] = static_cast<uint16_t>(bits >> 16);
  }
  TensorView v = t.view();
  store[name] = std::move(t);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[i + 1]);
  Qwen2VisionConfig cfg;  // the defaults are Qwen2-VL-7B's vision tower
  std::map<std::string, Tensor> store;
  const auto t0 = std::chrono::steady_clock::now();
  Qwen2VisionEncoder host(cfg, [&](const std::string& n, const Shape& s) { return random_bf16(n, s, store); }, "");
  CudaQwen2Vision gpu(host, DType::BF16);
  gpu.reserve(32768);
  std::printf("vision tower: %s, weights %.2f GiB, workspace %.2f GiB for 32768 patches, setup %.1f s\n",
              cuda::describe_gpu(0).c_str(), static_cast<double>(gpu.weight_bytes()) / (1 << 30),
              static_cast<double>(gpu.workspace_bytes(32768)) / (1 << 30),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  cudaStream_t s;
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cuda::DeviceBuffer out(static_cast<size_t>(8192 * cfg.out_hidden_size) * 4);
  const std::vector<std::pair<std::string, std::array<int32_t, 3>>> shapes = {
      {"image_448", {1, 32, 32}}, {"frames8_448", {4, 32, 32}}, {"frames64_448", {32, 32, 32}}};
  for (const auto& [name, grid] : shapes) {
    MediaPixels m;
    m.grid_thw = grid;
    m.modality = grid[0] == 1 ? Modality::Image : Modality::Video;
    const int64_t P = int64_t(grid[0]) * grid[1] * grid[2];
    m.data.resize(static_cast<size_t>(P * cfg.patch_dim()));
    for (size_t i = 0; i < m.data.size(); ++i) m.data[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    const MediaPixels* items[] = {&m};
    // encode(): pixels uploaded from pageable memory on a copy stream, group by group of whole
    // frames (at most g patches; g = 32768: one group, the upload before the tower), overlapped
    // with the tower over the groups already up; run(): the tower over pixels already on the GPU
    // (as the peer's are), one call.
    bool one_group_done = false;  // a larger g gives the same single group again
    for (int64_t g : {int64_t(0), int64_t(4096), int64_t(8192), int64_t(32768)}) {
      if (g > 0 && one_group_done) continue;
      one_group_done = g >= P;
      if (g > 0) gpu.set_group_patches(g);
      else gpu.upload_pixels(items, s);  // once: run() reads them
      std::vector<double> ms;
      for (int r = 0; r < reps + 2; ++r) {
        VLM_CUDA_CHECK(cudaStreamSynchronize(s));
        const auto a = std::chrono::steady_clock::now();
        if (g > 0) gpu.encode(items, out.as<float>(), s);
        else gpu.run(items, out.as<float>(), s);
        VLM_CUDA_CHECK(cudaStreamSynchronize(s));
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
        if (r >= 2) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const std::string what = g > 0 ? "with_upload_g" + std::to_string(g) : std::string("resident");
      std::printf("vision %s %s %.2f ms (min %.2f, %lld patches)\n", name.c_str(), what.c_str(), ms[ms.size() / 2],
                  ms.front(), static_cast<long long>(P));
    }
  }
  return 0;
}
