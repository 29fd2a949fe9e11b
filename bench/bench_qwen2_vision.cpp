// Vision encoder throughput of the Qwen2-VL-7B and Qwen2.5-VL-7B vision towers (random bf16
// weights, f32 compute; model/vision/qwen2_vision.h) on a 448x448 image (grid 1x32x32: 1024 patches,
// 256 merged tokens) and an 8-frame 448x448 video (grid 4x32x32: 4096 patches, 1024 tokens;
// attention within each temporal step). The full 32-block towers take minutes on 2 cores, so the
// towers are built with 1 and 2 blocks: per-block time = t(2) - t(1), and the full tower is
// estimated as t(1) + 31 x per-block (patch embed and merger are in t(1)). Qwen2.5-VL's timed
// blocks are window-attention blocks (its fullatt_block_indexes are 7, 15, 23, 31).
// Global pool of 2 threads (or VLM_BENCH_THREADS). CPU time is the process's (all threads): on a
// loaded machine CPU / threads is a steadier estimate of the idle wall time than the wall time
// itself. Results: bench/RESULTS.md
// ("Vision encoder: Qwen2-VL").
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/core/thread_pool.h"
#include "model/vision/qwen2_vision.h"

namespace {

using namespace vlm;

struct Tower {
  Qwen2VisionConfig cfg;
  std::map<std::string, Tensor> tensors;
  std::unique_ptr<Qwen2VisionEncoder> enc;

  Tower(bool qwen25, int depth) {
    cfg.qwen25 = qwen25;
    cfg.hidden_size = 1280;
    cfg.intermediate_size = qwen25 ? 3420 : 5120;
    cfg.out_hidden_size = 3584;
    cfg.depth = depth;
    cfg.num_heads = 16;
    cfg.window_size = 112;
    cfg.fullatt_block_indexes = qwen25 ? std::vector<int>{7, 15, 23, 31} : std::vector<int>{};
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    WeightLookup lookup = [&](const std::string& name, const Shape& shape) {
      Tensor t = Tensor::empty(shape, DType::BF16);
      std::vector<float> f(static_cast<size_t>(t.numel()));
      const bool norm = name.find("norm") != std::string::npos || name.find("ln_q") != std::string::npos;
      for (float& x : f) x = norm && name.find("weight") != std::string::npos ? 1.0f + nd(rng) : nd(rng);
      convert_from_f32(f.data(), DType::BF16, t.data(), t.numel());
      TensorView v = t.view();
      tensors[name] = std::move(t);
      return v;
    };
    enc = std::make_unique<Qwen2VisionEncoder>(cfg, lookup, "");
  }
};

Tower& tower(bool qwen25, int depth) {
  static std::map<std::pair<bool, int>, std::unique_ptr<Tower>> all;
  static bool threads = [] {
    const char* t = std::getenv("VLM_BENCH_THREADS");
    set_num_threads(t ? std::atoi(t) : 2);
    return true;
  }();
  (void)threads;
  const std::pair<bool, int> key{qwen25, depth};
  if (!all.count(key)) {
    all.clear();  // keep one tower in memory
    all[key] = std::make_unique<Tower>(qwen25, depth);
  }
  return *all[key];
}

// Args: qwen25 (0/1), depth (blocks), frames (1: the image; 8: the video).
void BM_Qwen2Vision(benchmark::State& state) {
  const bool qwen25 = state.range(0) != 0;
  const int depth = static_cast<int>(state.range(1)), frames = static_cast<int>(state.range(2));
  Tower& m = tower(qwen25, depth);
  const std::array<int32_t, 3> grid{frames == 1 ? 1 : frames / 2, 32, 32};
  const int64_t P = static_cast<int64_t>(grid[0]) * grid[1] * grid[2], K = m.cfg.patch_dim();
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> pixels(static_cast<size_t>(P * K));
  for (float& x : pixels) x = nd(rng);
  std::vector<float> out(static_cast<size_t>(P / 4 * m.cfg.out_hidden_size));
  for (auto _ : state) {
    m.enc->encode(pixels.data(), std::span<const std::array<int32_t, 3>>(&grid, 1), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["patches"] = static_cast<double>(P);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(P / 4 * state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Qwen2Vision)
    ->ArgNames({"qwen25", "depth", "frames"})
    ->Args({0, 1, 1})->Args({0, 2, 1})->Args({0, 1, 8})->Args({0, 2, 8})
    ->Args({1, 1, 1})->Args({1, 2, 1})->Args({1, 1, 8})->Args({1, 2, 8})
    ->Iterations(2)->Unit(benchmark::kSecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace

BENCHMARK_MAIN();
