// Vision encoder throughput at LLaVA-1.5's real geometry: CLIP ViT-L/14 at 336 px (hidden 1024,
// MLP 4096, 16 heads, 577 tokens per image), running the 23 layers LLaVA uses
// (vision_feature_layer -2 of 24), then the projector (1024 -> 4096 -> 4096). Random bf16 weights
// generated in memory. Global pool of 2 threads (or VLM_BENCH_THREADS). Counter: images/s.
// Results: bench/RESULTS.md ("Vision encoder").
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/core/thread_pool.h"
#include "model/vision/clip_vision.h"
#include "model/vision/projector.h"

namespace {

using namespace vlm;

struct Model {
  ClipVisionConfig cfg;
  std::map<std::string, Tensor> tensors;
  std::unique_ptr<ClipVisionEncoder> enc;
  std::unique_ptr<LlavaProjector> proj;

  Model() {
    cfg.hidden_size = 1024;
    cfg.intermediate_size = 4096;
    cfg.num_layers = 24;
    cfg.num_heads = 16;
    cfg.image_size = 336;
    cfg.patch_size = 14;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    WeightLookup lookup = [&](const std::string& name, const Shape& shape) {  // one tensor per name
      if (auto it = tensors.find(name); it != tensors.end()) return it->second.view();
      Tensor t = Tensor::empty(shape, DType::BF16);
      std::vector<float> f(static_cast<size_t>(t.numel()));
      const bool norm = name.find("norm") != std::string::npos || name.find("layrnorm") != std::string::npos;
      for (float& x : f) x = norm && name.find("weight") != std::string::npos ? 1.0f + nd(rng) : nd(rng);
      convert_from_f32(f.data(), DType::BF16, t.data(), t.numel());
      TensorView v = t.view();
      tensors[name] = std::move(t);
      return v;
    };
    enc = std::make_unique<ClipVisionEncoder>(cfg, lookup, "", 23);
    proj = std::make_unique<LlavaProjector>(lookup, "mmp.", 1024, 4096, true);
  }
};

Model& model() {
  static Model* m = [] {
    const char* t = std::getenv("VLM_BENCH_THREADS");
    set_num_threads(t ? std::atoi(t) : 2);
    return new Model();
  }();
  return *m;
}

void BM_VisionEncoder(benchmark::State& state) {
  Model& m = model();
  const int64_t N = state.range(0), P = m.cfg.num_patches();
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> pixels(static_cast<size_t>(N * 3 * 336 * 336));
  for (float& x : pixels) x = nd(rng);
  std::vector<float> feats(static_cast<size_t>(N * P * 1024)), out(static_cast<size_t>(N * P * 4096));
  const int layer = 23;
  for (auto _ : state) {
    m.enc->encode(pixels.data(), N, std::span<const int>(&layer, 1), true, feats.data());
    m.proj->forward(feats.data(), N * P, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["images/s"] = benchmark::Counter(static_cast<double>(N * state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

BENCHMARK(BM_VisionEncoder)->Arg(1)->Arg(2)->Iterations(2)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
