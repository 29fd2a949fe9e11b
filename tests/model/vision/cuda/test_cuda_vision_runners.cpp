// The vision towers written once (model/arch) over CudaLayers against the hand-written GPU towers
// they replace (docs/WRITTEN_ONCE.md step 5b), on the committed fixtures, f32 and bf16:
//  - CudaQwen2VisionRunner vs CudaQwen2Vision (Qwen2-VL, Qwen2.5-VL with windows): bit for bit,
//    through encode() (pixels converted to dt on the host, one group), through encode() in groups
//    of one frame (two streams, lanes 0 and 1), and through upload_pixels() + run() (f32 pixels
//    gathered and rounded on the GPU); bf16 with cuDNN on for equal segments in both;
//  - CudaLlavaVisionRunner vs CudaClipVision: bit for bit on the fixtures (CLIP, hidden state -2,
//    class row dropped), and on small random towers for what the fixtures lack: SigLIP (conv bias,
//    no class token, gelu_tanh, an image size that is not a multiple of the patch), several hidden
//    states side by side (hidden state 0 among them), GELU erf;
//  - CudaMediaEncoder (what the server runs) with VLM_CUDA_VISION_LEGACY=1 and without, on
//    Frames8 items (rows made on the GPU), eager and lazy: the same bits, and the right tower;
//  - the runners against Hugging Face's f32 rows (1e-4 relative in f32, 2e-2 in bf16), so that the
//    reference itself is checked in the same run.
// Bit for bit: the layers call the kernels the old towers called, in their order, with the same
// inputs; a difference is a bug to find (VLM_CUDA_PROFILE lists nothing here: compare the launch
// sequences with nsys), never a tolerance to widen.
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
#include "model/vision/cuda/cuda_clip_vision.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"
#include "model/vision/cuda/cuda_qwen2_vision.h"
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

// upload_pixels() + run(): f32 pixels on the GPU, one call.
std::vector<float> run_on_gpu(CudaVisionTower& tower, const std::vector<MediaPixels>& items) {
  int64_t cost = 0, rows = 0;
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) {
    cost += tower.cost(m);
    rows += tower.out_rows(m);
    ptrs.push_back(&m);
  }
  tower.reserve(cost);
  cuda::DeviceBuffer out(static_cast<size_t>(rows * tower.out_features()) * 4);
  tower.upload_pixels(ptrs, nullptr);
  tower.run(ptrs, out.as<float>(), nullptr);
  return to_host<float>(out, static_cast<size_t>(rows * tower.out_features()));
}

class CudaQwen2VisionRunnerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQwen2VisionRunnerTest, EqualsTheHandWrittenTowerBitForBit) {
  VLM_REQUIRE_GPU();
  const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/" + GetParam());
  const std::vector<VisionCase> cases = qwen2_cases();
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaQwen2Vision old_tower(model->vision(), dt);
    CudaQwen2VisionRunner new_tower(model->vision(), dt);
    for (const VisionCase& vc : cases) {
      const std::string what = GetParam() + " " + vc.name + " " + dtype_name(dt);
      const std::vector<float> a = encode_on_gpu(old_tower, vc.items), b = encode_on_gpu(new_tower, vc.items);
      ASSERT_FALSE(a.empty()) << what;
      EXPECT_EQ(first_difference(a, b), "identical") << what << " encode()";
      const std::vector<float> c = run_on_gpu(old_tower, vc.items), d = run_on_gpu(new_tower, vc.items);
      EXPECT_EQ(first_difference(c, d), "identical") << what << " run()";
      old_tower.set_group_patches(1);  // a group per frame, alternating streams
      new_tower.set_group_patches(1);
      const std::vector<float> e = encode_on_gpu(old_tower, vc.items), f = encode_on_gpu(new_tower, vc.items);
      EXPECT_EQ(first_difference(e, f), "identical") << what << " encode() a frame a group";
      old_tower.set_group_patches(4096);
      new_tower.set_group_patches(4096);
    }
    if (dt == DType::BF16) {
      EXPECT_EQ(new_tower.cudnn_calls(), old_tower.cudnn_calls());
    }
  }
}

TEST_P(CudaQwen2VisionRunnerTest, EmbeddingsMatchHuggingFace) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/qwen2vl/" + GetParam();
  const auto model = Qwen2VLModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaQwen2VisionRunner tower(model->vision(), dt);
    for (const VisionCase& vc : qwen2_cases()) {
      const std::vector<float> want = floats(*ref, vc.name), got = encode_on_gpu(tower, vc.items);
      ASSERT_EQ(got.size(), want.size()) << vc.name;
      EXPECT_LE(rel_error(got, want), dt == DType::F32 ? 1e-4 : 2e-2) << vc.name << " " << dtype_name(dt);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaQwen2VisionRunnerTest, ::testing::Values("qwen2_vl_tiny", "qwen2_5_vl_tiny"));

class CudaLlavaVisionRunnerTest : public ::testing::TestWithParam<std::string> {};

std::unique_ptr<CudaLlavaVisionRunner> llava_runner(const LlavaModel& m, DType dt) {
  return std::make_unique<CudaLlavaVisionRunner>(m.wiring().spec(), m.tower_weights(), m.projector_weights(), dt);
}

TEST_P(CudaLlavaVisionRunnerTest, EqualsTheHandWrittenTowerBitForBit) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/llava/" + GetParam();
  const auto model = LlavaModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const LlavaConfig& c = model->config();
  const std::vector<VisionCase> cases = clip_cases(*ref, c.vision.image_size);
  ASSERT_FALSE(cases.empty());
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaClipVision old_tower(model->vision(), model->projector(), c.feature_layers, c.drop_cls, dt);
    const auto new_tower = llava_runner(*model, dt);
    EXPECT_EQ(new_tower->out_features(), old_tower.out_features());
    for (const VisionCase& vc : cases) {
      const std::string what = GetParam() + " " + vc.name + " " + dtype_name(dt);
      const std::vector<float> a = encode_on_gpu(old_tower, vc.items), b = encode_on_gpu(*new_tower, vc.items);
      ASSERT_FALSE(a.empty()) << what;
      EXPECT_EQ(first_difference(a, b), "identical") << what;
    }
  }
}

TEST_P(CudaLlavaVisionRunnerTest, ProjectorOutputMatchesHuggingFace) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/llava/" + GetParam();
  const auto model = LlavaModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  for (DType dt : {DType::F32, DType::BF16}) {
    const auto tower = llava_runner(*model, dt);
    for (const VisionCase& vc : clip_cases(*ref, model->config().vision.image_size)) {
      const std::vector<float> want = floats(*ref, vc.name), got = encode_on_gpu(*tower, vc.items);
      ASSERT_EQ(got.size(), want.size()) << vc.name;
      EXPECT_LE(rel_error(got, want), dt == DType::F32 ? 1e-4 : 2e-2) << vc.name << " " << dtype_name(dt);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLlavaVisionRunnerTest, ::testing::Values("llava_small", "llava_336"));

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

TEST(CudaLlavaVisionRunnerRandom, SiglipAndSeveralHiddenStatesEqualTheHandWrittenTower) {
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
    for (DType dt : {DType::F32, DType::BF16}) {
      CudaClipVision old_tower(host, projector, rc.hidden, rc.drop_cls, dt);
      CudaLlavaVisionRunner new_tower(LlavaVisionSpec{c, rc.hidden, rc.drop_cls, out_features, true},
                                      WeightSource(lookup, "t."), WeightSource(lookup, "p."), dt);
      const std::vector<float> a = encode_on_gpu(old_tower, images), b = encode_on_gpu(new_tower, images);
      ASSERT_EQ(a.size(), static_cast<size_t>(N * new_tower.out_rows(images[0]) * out_features)) << rc.name;
      EXPECT_EQ(first_difference(a, b), "identical") << rc.name << " " << dtype_name(dt);
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

TEST(CudaVisionMediaEncoder, LegacySwitchAndLayersGiveTheSameRows) {
  VLM_REQUIRE_GPU();
  std::mt19937 g(9);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 5; ++i) frames.push_back(random_image(85, 57, g));
  const std::vector<MediaPixels> items = {
      qwen2vl_frames8({random_image(100, 70, g)}, Qwen2VLPreprocessConfig{}, Modality::Image),
      qwen2vl_frames8(frames, Qwen2VLPreprocessConfig{}, Modality::Video)};
  for (const char* fixture : {"qwen2_vl_tiny", "qwen2_5_vl_tiny"}) {
    const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/" + fixture);
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t step : {int64_t(0), int64_t(24)}) {  // eager; lazy units of one temporal group
        SCOPED_TRACE(std::string(fixture) + " " + dtype_name(dt) + " step_patches " + std::to_string(step));
        setenv("VLM_CUDA_VISION_LEGACY", "1", 1);
        auto legacy = CudaMediaEncoder::make(*model, dt, 4096, step);
        unsetenv("VLM_CUDA_VISION_LEGACY");
        auto layers = CudaMediaEncoder::make(*model, dt, 4096, step);
        EXPECT_NE(dynamic_cast<const CudaQwen2Vision*>(&legacy->tower()), nullptr);
        EXPECT_NE(dynamic_cast<const CudaQwen2VisionRunner*>(&layers->tower()), nullptr);
        const std::vector<float> a = media_encoder_rows(*legacy, items), b = media_encoder_rows(*layers, items);
        ASSERT_FALSE(a.empty());
        EXPECT_EQ(first_difference(a, b), "identical");
      }
  }
}

}  // namespace
}  // namespace vlm::testing
