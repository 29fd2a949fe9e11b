// The GPU vision runners (the architectures written once over CudaLayers) beyond the fixtures'
// Hugging Face checks of test_cuda_vision_towers.cpp:
//  - CudaLlavaVisionRunner against its CPU twin (ClipVisionEncoder + LlavaProjector, exact f32) on
//    small random towers for what the fixtures lack: SigLIP (conv bias, no class token,
//    gelu_tanh, an image size that is not a multiple of the patch), several hidden states side by
//    side (hidden state 0 among them), GELU erf: 1e-4 relative in f32, 2e-2 in bf16 (the
//    fixtures' bounds against HF f32);
//  - CudaMediaEncoder (what the server runs) picks the runners, and on Frames8 items (rows made
//    on the GPU), eager and lazy, gives the runner's own rows (eager: the same bits as the
//    runner's encode() reserved alike) and the CPU model's rows within the same bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>

#include "engine/cuda/cuda_media_encoder.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/arch/llava_wiring.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "model/vision/projector.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/model/vision/cuda/cuda_vision_cases.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_image.h"

namespace vlm::testing {
namespace {

const std::string kFix = VLM_FIXTURES_DIR;

// The first differing value (index, both values), or "identical".
std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0)
      return "value " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]) +
             " (rel error of all " + std::to_string(rel_error(a, b)) + ")";
  return "identical";
}

// Random bf16 tensors by name (a checkpoint's dtype), uniform in [-0.1, 0.1] (norm weights 1 +- 0.1).
struct RandomCheckpoint {
  std::map<std::string, Tensor> store;
  std::mt19937 rng{11};
  TensorView operator()(const std::string& name, const Shape& shape) {
    auto it = store.find(name);
    if (it != store.end()) return it->second.view();
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    const bool norm = name.find("norm") != std::string::npos && name.find(".weight") != std::string::npos;
    for (float& x : v) x = (norm ? 1.0f : 0.0f) + u(rng);
    Tensor t = Tensor::empty(shape, DType::BF16);
    convert_from_f32(v.data(), DType::BF16, t.data(), t.numel());
    return store.emplace(name, std::move(t)).first->second.view();
  }
};

struct RandomClipCase {
  const char* name;
  bool siglip;
  VisionActivation act;
  int64_t image_size;
  std::vector<int> hidden;
  bool drop_cls;
};

TEST(CudaLlavaVisionRunnerRandom, SiglipAndSeveralHiddenStatesMatchTheCpuTwin) {
  VLM_REQUIRE_GPU();
  const std::vector<RandomClipCase> cases = {
      {"clip, hidden states 0 and 2", false, VisionActivation::QuickGelu, 28, {0, 2}, true},
      {"clip, gelu, every row", false, VisionActivation::Gelu, 28, {3, 1}, false},
      {"siglip, 30 px over 7-px patches", true, VisionActivation::GeluTanh, 30, {3}, false},
      {"siglip, hidden states 3 and 1", true, VisionActivation::GeluTanh, 28, {3, 1}, false}};
  for (const RandomClipCase& rc : cases) {
    ClipVisionConfig c;
    c.hidden_size = 64, c.intermediate_size = 96, c.num_layers = 3, c.num_heads = 4;
    c.image_size = rc.image_size, c.patch_size = 7, c.layer_norm_eps = 1e-6;
    c.act = rc.act, c.siglip = rc.siglip;
    const int64_t out_features = 48, N = 3;
    RandomCheckpoint ckpt;
    const WeightLookup lookup = [&ckpt](const std::string& n, const Shape& sh) { return ckpt(n, sh); };
    int deepest = 0;
    for (int l : rc.hidden) deepest = std::max(deepest, l);
    const ClipVisionEncoder host(c, lookup, "t.", deepest);
    const int64_t Fin = c.hidden_size * static_cast<int64_t>(rc.hidden.size());
    const LlavaProjector projector(lookup, "p.", Fin, out_features, true);
    std::vector<MediaPixels> images(static_cast<size_t>(N));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (MediaPixels& m : images) {
      m.height = m.width = static_cast<int>(c.image_size);
      m.data.resize(static_cast<size_t>(3 * c.image_size * c.image_size));
      for (float& x : m.data) x = u(rng);
    }
    // The CPU twin: pixels [N, 3, S, S] -> the selected states [N, L', Fin] -> the projector.
    std::vector<float> pixels;
    for (const MediaPixels& m : images) pixels.insert(pixels.end(), m.data.begin(), m.data.end());
    const int64_t L = c.num_positions() - (rc.drop_cls ? 1 : 0);
    std::vector<float> feats(static_cast<size_t>(N * L * Fin)), want(static_cast<size_t>(N * L * out_features));
    host.encode(pixels.data(), N, rc.hidden, rc.drop_cls, feats.data());
    projector.forward(feats.data(), N * L, want.data());
    for (DType dt : {DType::F32, DType::BF16}) {
      CudaLlavaVisionRunner tower(LlavaVisionSpec{c, rc.hidden, rc.drop_cls, out_features, true},
                                  WeightSource(lookup, "t."), WeightSource(lookup, "p."), dt);
      ASSERT_EQ(tower.out_rows(images[0]), L) << rc.name;
      const std::vector<float> got = encode_on_gpu(tower, images);
      ASSERT_EQ(got.size(), want.size()) << rc.name;
      const double err = rel_error(got, want);
      std::printf("[ gpu vision ] random %s %s: rel error %.3g against the CPU\n", rc.name, dtype_name(dt), err);
      EXPECT_LE(err, dt == DType::F32 ? 1e-4 : 2e-2) << rc.name << " " << dtype_name(dt);
    }
  }
}

// The media encoder's rows for items (its tower chosen at make()), downloaded.
std::vector<float> media_encoder_rows(CudaMediaEncoder& enc, const std::vector<MediaPixels>& items) {
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  const auto e = enc.encode(ptrs, {}, nullptr);
  e->ensure_rows(0, e->rows);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(static_cast<size_t>(e->rows * enc.tower().out_features()));
  VLM_CUDA_CHECK(cudaMemcpy(out.data(), e->data, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

TEST(CudaVisionMediaEncoder, RunsTheRunnersAndGivesTheirRows) {
  VLM_REQUIRE_GPU();
  for (const char* fixture : {"llava_small", "llava_336"}) {
    const auto model = LlavaModel::load(kFix + "/llava/" + fixture);
    const auto enc = CudaMediaEncoder::make(*model, DType::BF16, 4096, 0);
    ASSERT_NE(enc, nullptr) << fixture;
    EXPECT_NE(dynamic_cast<const CudaLlavaVisionRunner*>(&enc->tower()), nullptr) << fixture;
  }
  std::mt19937 g(9);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 5; ++i) frames.push_back(random_image(85, 57, g));
  const std::vector<MediaPixels> items = {
      qwen2vl_frames8({random_image(100, 70, g)}, Qwen2VLPreprocessConfig{}, Modality::Image),
      qwen2vl_frames8(frames, Qwen2VLPreprocessConfig{}, Modality::Video)};
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  for (const char* fixture : {"qwen2_vl_tiny", "qwen2_5_vl_tiny"}) {
    const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/" + fixture);
    int64_t rows = 0;
    for (const MediaPixels& m : items) rows += model->media_tokens(m, 0);
    std::vector<float> cpu(static_cast<size_t>(rows * model->vision().config().out_hidden_size));
    model->encode_media(ptrs, cpu.data());
    for (DType dt : {DType::F32, DType::BF16}) {
      CudaQwen2VisionRunner runner(model->vision(), dt);
      runner.reserve(4096);  // as the encoder reserves it
      cuda::DeviceBuffer out(cpu.size() * 4);
      runner.encode(ptrs, out.as<float>(), nullptr);
      const std::vector<float> direct = to_host<float>(out, cpu.size());
      for (int64_t step : {int64_t(0), int64_t(24)}) {  // eager; lazy units of one temporal group
        SCOPED_TRACE(std::string(fixture) + " " + dtype_name(dt) + " step_patches " + std::to_string(step));
        auto enc = CudaMediaEncoder::make(*model, dt, 4096, step);
        ASSERT_NE(enc, nullptr);
        EXPECT_NE(dynamic_cast<const CudaQwen2VisionRunner*>(&enc->tower()), nullptr);
        const std::vector<float> got = media_encoder_rows(*enc, items);
        ASSERT_EQ(got.size(), cpu.size());
        if (step == 0) EXPECT_EQ(first_difference(got, direct), "identical");
        EXPECT_LE(rel_error(got, cpu), dt == DType::F32 ? 1e-4 : 2e-2);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing
