// Vision encode time of GPU vision towers (bf16 tensor cores, random bf16 weights: RandomWeights,
// seeded per tensor name), shape after shape, in this order:
//   Qwen2-VL-7B's tower (CudaQwen2VisionRunner: depth 32, width 1280, 16 heads, MLP 5120, merger to
//   3584): a 448x448 image (grid 1x32x32: 1024 patches), 8 frames (4x32x32) and 64 frames
//   (32x32x32) of 448x448 ("image_448", "frames8_448", "frames64_448");
//   CLIP-L/336 as LLaVA-1.5-7B uses it (CudaLlavaVisionRunner: 24 layers of 1024, 16 heads of 64, MLP
//   4096, quick_gelu, 336 px / 14-px patches: 577 tokens with the class token; hidden state 23 of
//   24 (vision_feature_layer -2, so 23 layers run), class row dropped, projector 1024 -> 4096):
//   1 and 8 images ("clip_l336_x1", "clip_l336_x8");
//   SigLIP-so400m as LLaVA-OneVision uses it (CudaLlavaVisionRunner with siglip: 27 layers of 1152, 16
//   heads of 72, MLP 4304, gelu_tanh; the last hidden state, every row, projector 1152 -> 3584):
//   1 and 10 tiles ("siglip_378_x1", "siglip_378_x10"). At 378 px (27 x 14), not the released
//   384: ClipVisionConfig refuses an image size that is not a multiple of the patch (see
//   docs/WRITTEN_ONCE.md, "Found while reading"); both give 27x27 = 729 patches, so the tower's
//   work is the same. The 384-px case waits for step 7 of that plan.
// Times per shape: run() alone over pixels already on the GPU (the peer's case, "resident"), and
// whole encode() calls as the server makes them (pixels uploaded from pageable host memory
// included; Qwen2-VL: group by group of whole frames overlapped with the tower,
// "with_upload_g<group patches>"; CLIP/SigLIP: the upload, then the tower, "with_upload"), each
// until the stream is idle: median of --reps after two warm-ups. bench/cuda/hf_vision_encode.py
// times transformers on the Qwen2-VL shapes (the peer, in the same run:
// bench/cuda/run_vision_bench.sh). Prints "vision <shape> <variant> <ms> ms ...".
//
// The towers are the architectures written once (model/arch) over CudaLayers.
//
// Usage: bench_cuda_vision [--reps 10] [--dump FILE] [--devices N]
// --devices N (N >= 2; issue 42's data-parallel encoder): instead, Qwen2-VL-7B's tower on 64
// frames of 448x448 (Rows form, pageable) on device 0 alone (tower.encode) and over devices
// 0..N-1 (CudaVisionDataParallel, rows gathered to device 0), per group size 4096 and 8192:
// "vision frames64_448 devices1_g<g> <ms> ms", "vision frames64_448 devices<N>_g<g> <ms> ms
// ... speedup <x>, rows identical yes|no".
// --dump FILE (issue 39: old vs refactored binaries, `cmp` bit for bit; bench_dump.h): raw
// little-endian f32, one record per (shape, variant) in the order above and the order the
// variants print: the output rows [rows, C] of the variant's last timed call (f32, what the
// decoder would take). About 0.9 GB in all (64 frames: 8192 x 3584 per variant, four variants: 0.47 GB).
// Inputs are deterministic: weights seeded by tensor name, pixels from a fixed formula.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda/bench_dump.h"
#include "bench/cuda/random_weights.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "model/vision/cuda/cuda_vision_data_parallel.h"

using namespace vlm;
using bench::BenchDump;
using bench::RandomWeights;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs `call` (enqueues one encode on s) reps + 2 times, each timed until s is idle; returns the
// times of the last `reps` calls in ms, sorted.
template <typename F>
std::vector<double> time_calls(int reps, cudaStream_t s, const F& call) {
  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto a = Clock::now();
    call();
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
    if (r >= 2) ms.push_back(1e3 * seconds_since(a));
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

// Prints a variant's line and appends its output rows (device, [rows, cols] f32) to the dump.
void report(const std::string& shape, const std::string& variant, const std::vector<double>& ms, int64_t patches,
            const float* out, int64_t rows, int64_t cols, BenchDump& dump, cudaStream_t s) {
  std::printf("vision %s %s %.2f ms (min %.2f, %lld patches)\n", shape.c_str(), variant.c_str(), ms[ms.size() / 2],
              ms.front(), static_cast<long long>(patches));
  if (!dump.enabled()) return;
  std::vector<float> host(static_cast<size_t>(rows * cols));
  VLM_CUDA_CHECK(cudaMemcpyAsync(host.data(), out, host.size() * 4, cudaMemcpyDeviceToHost, s));
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  dump.append(shape + " " + variant, host.data(), rows, cols);
}

void bench_qwen2(int reps, BenchDump& dump, cudaStream_t s) {
  Qwen2VisionConfig cfg;  // the defaults are Qwen2-VL-7B's vision tower
  RandomWeights weights;
  const auto t0 = Clock::now();
  Qwen2VisionEncoder host(cfg, [&](const std::string& n, const Shape& sh) { return weights(n, sh); }, "");
  CudaQwen2VisionRunner gpu(host, DType::BF16);
  gpu.reserve(32768);
  std::printf("vision tower qwen2vl_7b: %s, weights %.2f GiB, workspace %.2f GiB for 32768 patches, setup %.1f s\n",
              cuda::describe_gpu(0).c_str(), static_cast<double>(gpu.weight_bytes()) / (1 << 30),
              static_cast<double>(gpu.workspace_bytes(32768)) / (1 << 30), seconds_since(t0));
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
      const auto ms = time_calls(reps, s, [&] {
        if (g > 0) gpu.encode(items, out.as<float>(), s);
        else gpu.run(items, out.as<float>(), s);
      });
      const std::string what = g > 0 ? "with_upload_g" + std::to_string(g) : std::string("resident");
      report(name, what, ms, P, out.as<float>(), gpu.out_rows(m), gpu.out_features(), dump, s);
    }
  }
}

// The 64-frame video on device 0 alone and over devices 0..n-1 (see the top comment).
void bench_qwen2_devices(int reps, int n, cudaStream_t s) {
  Qwen2VisionConfig cfg;
  RandomWeights weights;
  Qwen2VisionEncoder host(cfg, [&](const std::string& name, const Shape& sh) { return weights(name, sh); }, "");
  std::vector<int> devices;
  std::vector<std::unique_ptr<CudaVisionTower>> towers;
  for (int d = 0; d < n; ++d) {
    VLM_CUDA_CHECK(cudaSetDevice(d));
    auto t = std::make_unique<CudaQwen2VisionRunner>(host, DType::BF16);
    t->reserve(32768);
    std::printf("vision tower qwen2vl_7b on device %d: %s\n", d, cuda::describe_gpu(d).c_str());
    devices.push_back(d);
    towers.push_back(std::move(t));
  }
  VLM_CUDA_CHECK(cudaSetDevice(0));
  CudaVisionDataParallel dp(devices, std::move(towers));
  MediaPixels m;
  m.grid_thw = {32, 32, 32};
  m.modality = Modality::Video;
  const int64_t P = 32 * 32 * 32, rows = P / 4;
  m.data.resize(static_cast<size_t>(P * cfg.patch_dim()));
  for (size_t i = 0; i < m.data.size(); ++i) m.data[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  const FrameSlice slices[] = {{&m, 0, 32}};
  cuda::DeviceBuffer one(static_cast<size_t>(rows * cfg.out_hidden_size) * 4), many(one.bytes());
  const VisionDestination dest[] = {{0, many.as<float>(), s}};
  for (int64_t g : {int64_t(4096), int64_t(8192)}) {
    for (int i = 0; i < n; ++i) static_cast<CudaQwen2VisionRunner&>(dp.tower(i)).set_group_patches(g);
    const auto a = time_calls(reps, s, [&] { dp.tower(0).encode_frames(slices, one.as<float>(), s); });
    const auto b = time_calls(reps, s, [&] { dp.encode_call(slices, dest); });
    VLM_CUDA_CHECK(cudaSetDevice(0));
    const std::vector<size_t> cut = dp.assignment(slices);
    std::vector<float> ha(static_cast<size_t>(rows * cfg.out_hidden_size)), hb(ha.size());
    VLM_CUDA_CHECK(cudaMemcpy(ha.data(), one.get(), ha.size() * 4, cudaMemcpyDeviceToHost));
    VLM_CUDA_CHECK(cudaMemcpy(hb.data(), many.get(), hb.size() * 4, cudaMemcpyDeviceToHost));
    const bool same = std::memcmp(ha.data(), hb.data(), ha.size() * 4) == 0;
    const double ma = a[a.size() / 2], mb = b[b.size() / 2];
    std::printf("vision frames64_448 devices1_g%lld %.2f ms (min %.2f, %lld patches)\n", static_cast<long long>(g), ma,
                a.front(), static_cast<long long>(P));
    std::printf("vision frames64_448 devices%d_g%lld %.2f ms (min %.2f, %lld patches, %zu groups, device 0 takes %zu), "
                "speedup %.2fx, rows identical %s\n",
                n, static_cast<long long>(g), mb, b.front(), static_cast<long long>(P), cut.back(), cut[1], ma / mb,
                same ? "yes" : "no");
  }
}

// A CLIP / SigLIP tower with a LLaVA projector, and the image counts it runs.
struct ClipShape {
  std::string name;
  ClipVisionConfig cfg;
  int feature_layer;     // the hidden state the projector reads (layers run: this many)
  bool drop_cls;         // LLaVA's "default" strategy (CLIP), else "full"
  int64_t out_features;  // the projector's output: the decoder's hidden size
  std::vector<int> images;
};

void bench_clip(const ClipShape& sh, int reps, BenchDump& dump, cudaStream_t s) {
  const ClipVisionConfig& c = sh.cfg;
  RandomWeights weights;
  const auto t0 = Clock::now();
  const WeightLookup lookup = [&](const std::string& n, const Shape& shape) { return weights(n, shape); };
  const std::string tower_prefix = "vision_tower.vision_model.", projector_prefix = "multi_modal_projector.";
  const LlavaVisionSpec spec{c, {sh.feature_layer}, sh.drop_cls, sh.out_features, true};
  CudaLlavaVisionRunner gpu(spec, WeightSource(lookup, tower_prefix), WeightSource(lookup, projector_prefix),
                            DType::BF16);
  const int max_images = *std::max_element(sh.images.begin(), sh.images.end());
  gpu.reserve(max_images);
  std::printf("vision tower %s: %lld layers run of %lld, %lld tokens per image, weights %.2f GiB, workspace %.2f GiB "
              "for %d images, setup %.1f s\n",
              sh.name.c_str(), static_cast<long long>(sh.feature_layer), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.num_positions()), static_cast<double>(gpu.weight_bytes()) / (1 << 30),
              static_cast<double>(gpu.workspace_bytes(max_images)) / (1 << 30), max_images, seconds_since(t0));
  std::vector<MediaPixels> pixels(static_cast<size_t>(max_images));
  for (size_t n = 0; n < pixels.size(); ++n) {  // pixel_values [3, S, S], a fixed pattern per image
    MediaPixels& m = pixels[n];
    m.height = m.width = static_cast<int>(c.image_size);
    m.data.resize(static_cast<size_t>(3 * c.image_size * c.image_size));
    for (size_t i = 0; i < m.data.size(); ++i)
      m.data[i] = static_cast<float>((i * 2654435761u + n * 7919u) % 1000) / 500.0f - 1.0f;
  }
  const int64_t C = gpu.out_features();
  cuda::DeviceBuffer out(static_cast<size_t>(max_images * gpu.out_rows(pixels[0]) * C) * 4);
  for (int N : sh.images) {
    std::vector<const MediaPixels*> items;
    for (int n = 0; n < N; ++n) items.push_back(&pixels[static_cast<size_t>(n)]);
    const std::string name = sh.name + "_x" + std::to_string(N);
    const int64_t rows = N * gpu.out_rows(pixels[0]), patches = N * c.num_patches();
    gpu.upload_pixels(items, s);  // once: run() reads them
    auto ms = time_calls(reps, s, [&] { gpu.run(items, out.as<float>(), s); });
    report(name, "resident", ms, patches, out.as<float>(), rows, C, dump, s);
    ms = time_calls(reps, s, [&] { gpu.encode(items, out.as<float>(), s); });
    report(name, "with_upload", ms, patches, out.as<float>(), rows, C, dump, s);
  }
}

std::vector<ClipShape> clip_shapes() {
  ClipShape clip{.name = "clip_l336", .cfg = {}, .feature_layer = 23, .drop_cls = true, .out_features = 4096,
                 .images = {1, 8}};
  clip.cfg.hidden_size = 1024;
  clip.cfg.intermediate_size = 4096;
  clip.cfg.num_layers = 24;
  clip.cfg.num_heads = 16;
  clip.cfg.image_size = 336;
  clip.cfg.patch_size = 14;
  clip.cfg.layer_norm_eps = 1e-5;
  clip.cfg.act = VisionActivation::QuickGelu;
  ClipShape siglip{.name = "siglip_378", .cfg = {}, .feature_layer = 27, .drop_cls = false, .out_features = 3584,
                   .images = {1, 10}};  // 10 tiles: a 3x3 AnyRes grid and the base image
  siglip.cfg.hidden_size = 1152;
  siglip.cfg.intermediate_size = 4304;
  siglip.cfg.num_layers = 27;
  siglip.cfg.num_heads = 16;
  siglip.cfg.image_size = 378;  // 27 x 14; the released 384 waits for step 7 (see the top comment)
  siglip.cfg.patch_size = 14;
  siglip.cfg.layer_norm_eps = 1e-6;
  siglip.cfg.act = VisionActivation::GeluTanh;
  siglip.cfg.siglip = true;
  return {clip, siglip};
}

int usage(int rc) {
  std::fprintf(rc == 0 ? stdout : stderr, "usage: bench_cuda_vision [--reps 10] [--dump FILE] [--devices N]\n");
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  std::string dump_path;
  int devices = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return usage(0);
    if (i + 1 >= argc) return usage(2);
    if (a == "--reps") reps = std::atoi(argv[++i]);
    else if (a == "--dump") dump_path = argv[++i];
    else if (a == "--devices") devices = std::atoi(argv[++i]);
    else return usage(2);
  }
  if (reps < 1 || devices < 1) return usage(2);
  try {
    BenchDump dump(dump_path);  // opened first: a bad path fails before the GPU work
    cudaStream_t s;
    VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (devices > 1) {
      int visible = 0;
      VLM_CUDA_CHECK(cudaGetDeviceCount(&visible));
      if (visible < devices) throw std::runtime_error("--devices " + std::to_string(devices) + ": " +
                                                      std::to_string(visible) + " GPU(s) visible");
      bench_qwen2_devices(reps, devices, s);
    } else {
      bench_qwen2(reps, dump, s);
      for (const ClipShape& sh : clip_shapes()) bench_clip(sh, reps, dump, s);
    }
    VLM_CUDA_CHECK(cudaStreamDestroy(s));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_vision: %s\n", e.what());
    return 1;
  }
  return 0;
}
