// The GPU vision towers (the architectures written once over CudaLayers: CudaQwen2VisionRunner,
// CudaLlavaVisionRunner) against Hugging Face transformers 5.17 on the committed fixtures, as
// tests/model/families/test_llava.cpp and test_qwen2vl.cpp check the CPU towers:
//  - exact path (F32 weights, f32 GEMMs without TF32, the f32 attention kernel): LLaVA's projector
//    output (CLIP penultimate layer, class token dropped) and Qwen2-VL / Qwen2.5-VL image and video
//    embeddings (images, two images, a video; window attention in Qwen2.5-VL) within 1e-4 relative;
//  - bf16 (tensor cores): within 2e-2 relative of the same references (the tiny fixtures' bound
//    for bf16 rounding through two to four layers; printed);
//  - bf16 against HF's own bf16 (issue I's rule: at most 1.5x HF bf16's error against HF f32),
//    when VLM_HF_BF16_DIR holds bench/gpu/hf_bf16_vision.py's output (made on the GPU machine);
//  - Qwen2-VL / Qwen2.5-VL through the other call paths within the same bounds: upload_pixels()
//    + run() (f32 pixels gathered and rounded on the GPU) and encode() a frame a group (two
//    streams);
//  - encode()'s whole-frame groups give the rows of one call;
//  - Qwen2-VL bf16 with the equal-segment attention through cuDNN and without it (VLM_CUDA_VISION_CUDNN=0);
//  - the memory plan: the runner's workspace of the Qwen2-VL-7B shape grows linearly with the
//    patches and fits beside the weights (GPU); an item beyond the reservation is a 400 naming
//    its size and the flag (no GPU needed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "kernels/core/check.h"
#include "kernels/cuda/attention/cudnn_library.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/decoder/safetensors.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/model/vision/cuda/cuda_vision_cases.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

const std::string kFix = VLM_FIXTURES_DIR;

// Each case on the tower within tol (relative L2) of HF's f32 rows in ref.
void expect_cases_match(CudaVisionTower& tower, const std::vector<VisionCase>& cases, const SafetensorsFile& ref,
                        const std::string& model, DType dt, double tol) {
  for (const VisionCase& vc : cases) {
    const std::vector<float> want = floats(ref, vc.name);
    const std::vector<float> got = encode_on_gpu(tower, vc.items);
    ASSERT_EQ(got.size(), want.size()) << vc.name;
    const double err = rel_error(got, want);
    EXPECT_LE(err, tol) << vc.name << " " << dtype_name(dt);
    std::printf("[ gpu vision ] %s %s %s: rel error %.3g\n", model.c_str(), vc.name.c_str(), dtype_name(dt), err);
  }
}

// The bf16 rule of issue I: our bf16 rows are at most 1.5x as far from HF's f32 rows (the fixture)
// as HF's own bf16 rows are (VLM_HF_BF16_DIR/<model>.vision.safetensors, written on the GPU
// machine by bench/gpu/hf_bf16_vision.py); skipped without them.
void expect_bf16_as_close_as_hf(CudaVisionTower& tower, const std::vector<VisionCase>& cases,
                                const SafetensorsFile& ref, const std::string& model) {
  const char* dir = std::getenv("VLM_HF_BF16_DIR");
  if (dir == nullptr) GTEST_SKIP() << "VLM_HF_BF16_DIR not set (bench/gpu/hf_bf16_vision.py writes it)";
  const std::string path = std::string(dir) + "/" + model + ".vision.safetensors";
  if (!std::ifstream(path)) GTEST_SKIP() << "no " << path;
  const auto hf = SafetensorsFile::open(path);
  for (const VisionCase& vc : cases) {
    const std::vector<float> want = floats(ref, vc.name), theirs = floats(*hf, vc.name);
    const std::vector<float> ours = encode_on_gpu(tower, vc.items);
    ASSERT_EQ(ours.size(), want.size()) << vc.name;
    ASSERT_EQ(theirs.size(), want.size()) << vc.name;
    const double e_ours = rel_error(ours, want), e_hf = rel_error(theirs, want);
    std::printf("[ bf16 vision ] %s %s: ours %.4g, HF bf16 %.4g (ratio %.2f)\n", model.c_str(), vc.name.c_str(),
                e_ours, e_hf, e_ours / e_hf);
    EXPECT_LE(e_ours, 1.5 * e_hf) << model << " " << vc.name;
  }
}

class CudaQwen2VisionRunnerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaQwen2VisionRunnerTest, EmbeddingsMatchHuggingFace) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/qwen2vl/" + GetParam();
  const auto model = Qwen2VLModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const std::vector<VisionCase> cases = qwen2_cases();
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaQwen2VisionRunner tower(model->vision(), dt);
    expect_cases_match(tower, cases, *ref, GetParam(), dt, dt == DType::F32 ? 1e-4 : 2e-2);
    // The other call paths within the same bounds: upload_pixels() + run() (f32 pixels gathered
    // and rounded on the GPU, one call), and encode() a frame a group (two streams, lanes 0 and 1).
    for (const VisionCase& vc : cases) {
      const std::vector<float> want = floats(*ref, vc.name), got = run_on_gpu(tower, vc.items);
      ASSERT_EQ(got.size(), want.size()) << vc.name;
      EXPECT_LE(rel_error(got, want), dt == DType::F32 ? 1e-4 : 2e-2) << vc.name << " " << dtype_name(dt) << " run()";
    }
    tower.set_group_patches(1);
    expect_cases_match(tower, cases, *ref, GetParam() + " a frame a group", dt, dt == DType::F32 ? 1e-4 : 2e-2);
  }
}

// encode() uploads and runs whole-frame groups (here one frame a group): the rows equal one run()
// over all the patches, in f32 to rounding (the groups' GEMMs see other row counts).
TEST_P(CudaQwen2VisionRunnerTest, FrameGroupsEqualOneCall) {
  VLM_REQUIRE_GPU();
  const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/" + GetParam());
  std::vector<VisionCase> cases = qwen2_cases();
  const VisionCase& vc = cases.back();  // two images and a video
  CudaQwen2VisionRunner tower(model->vision(), DType::F32);
  const std::vector<float> whole = encode_on_gpu(tower, vc.items);  // one group
  tower.set_group_patches(1);
  const std::vector<float> split = encode_on_gpu(tower, vc.items);
  ASSERT_EQ(split.size(), whole.size());
  EXPECT_LE(rel_error(split, whole), 1e-6);
}

// bf16 with the equal-segment attention through cuDNN (default) and with VLM_CUDA_VISION_CUDNN=0
// (varlen_attention): both within the bf16 bound of HF's f32 rows and of each other; cuDNN ran
// (the single image and the video's frames are equal segments) only when on.
TEST_P(CudaQwen2VisionRunnerTest, CudnnOnAndOffAgree) {
  VLM_REQUIRE_GPU();
  std::string why;
  if (cuda::cudnn_api(&why) == nullptr) GTEST_SKIP() << "cuDNN unavailable: " << why;
  const std::string dir = kFix + "/qwen2vl/" + GetParam();
  const auto model = Qwen2VLModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  setenv("VLM_CUDA_VISION_CUDNN", "0", 1);
  CudaQwen2VisionRunner off(model->vision(), DType::BF16);
  unsetenv("VLM_CUDA_VISION_CUDNN");
  CudaQwen2VisionRunner on(model->vision(), DType::BF16);
  for (const VisionCase& vc : qwen2_cases()) {
    const std::vector<float> want = floats(*ref, vc.name);
    const std::vector<float> a = encode_on_gpu(on, vc.items), b = encode_on_gpu(off, vc.items);
    ASSERT_EQ(a.size(), want.size()) << vc.name;
    ASSERT_EQ(b.size(), want.size()) << vc.name;
    const double e_on = rel_error(a, want), e_off = rel_error(b, want), e_pair = rel_error(a, b);
    std::printf("[ gpu vision cudnn ] %s %s: cuDNN %.3g, built-in %.3g, between %.3g\n", GetParam().c_str(),
                vc.name.c_str(), e_on, e_off, e_pair);
    EXPECT_LE(e_on, 2e-2) << vc.name << " cuDNN vs HF f32 " << e_on;
    EXPECT_LE(e_off, 2e-2) << vc.name << " built-in vs HF f32 " << e_off;
    EXPECT_LE(e_pair, 2e-2) << vc.name << " cuDNN vs built-in " << e_pair;
  }
  EXPECT_GT(on.cudnn_calls(), 0) << "cuDNN never ran (a plan that did not build is in the warnings)";
  EXPECT_EQ(off.cudnn_calls(), 0);
}

TEST_P(CudaQwen2VisionRunnerTest, Bf16IsAsCloseToHfF32AsHfBf16) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/qwen2vl/" + GetParam();
  const auto model = Qwen2VLModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  CudaQwen2VisionRunner tower(model->vision(), DType::BF16);
  expect_bf16_as_close_as_hf(tower, qwen2_cases(), *ref, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Tiny, CudaQwen2VisionRunnerTest, ::testing::Values("qwen2_vl_tiny", "qwen2_5_vl_tiny"));

class CudaLlavaVisionRunnerTest : public ::testing::TestWithParam<std::string> {};

std::unique_ptr<CudaLlavaVisionRunner> llava_runner(const LlavaModel& m, DType dt) {
  return std::make_unique<CudaLlavaVisionRunner>(m.wiring().spec(), m.tower_weights(), m.projector_weights(), dt);
}

TEST_P(CudaLlavaVisionRunnerTest, ProjectorOutputMatchesHuggingFace) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/llava/" + GetParam();
  const auto model = LlavaModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const LlavaConfig& c = model->config();
  const std::vector<VisionCase> cases = clip_cases(*ref, c.vision.image_size);
  EXPECT_FALSE(cases.empty());
  for (DType dt : {DType::F32, DType::BF16}) {
    const auto tower = llava_runner(*model, dt);
    expect_cases_match(*tower, cases, *ref, GetParam(), dt, dt == DType::F32 ? 1e-4 : 2e-2);
  }
}

TEST_P(CudaLlavaVisionRunnerTest, Bf16IsAsCloseToHfF32AsHfBf16) {
  VLM_REQUIRE_GPU();
  const std::string dir = kFix + "/llava/" + GetParam();
  const auto model = LlavaModel::load(dir);
  const auto ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const LlavaConfig& c = model->config();
  const auto tower = llava_runner(*model, DType::BF16);
  expect_bf16_as_close_as_hf(*tower, clip_cases(*ref, c.vision.image_size), *ref, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaLlavaVisionRunnerTest, ::testing::Values("llava_small", "llava_336"));

// A tower that plans like a Qwen2-VL one (cost: patches; a frame splits off) for
// check_vision_fits (no weights, no GPU); its workspace is a stand-in of 1 KiB a patch.
struct PlanOnlyTower : CudaVisionTower {
  Qwen2VisionConfig c;  // the defaults: Qwen2-VL-7B's vision tower
  int64_t cost(const MediaPixels& m) const override { return int64_t(m.grid_thw[0]) * m.grid_thw[1] * m.grid_thw[2]; }
  int64_t out_rows(const MediaPixels& m) const override { return cost(m) / 4; }
  int64_t out_features() const override { return c.out_hidden_size; }
  int64_t workspace_bytes(int64_t p) const override { return p * 1024; }
  void reserve(int64_t p) override { reserved_ = p; }
  void upload_pixels(std::span<const MediaPixels* const>, cudaStream_t) override {}
  void run(std::span<const MediaPixels* const>, float*, cudaStream_t) override {}
};

// Random bf16 tensors by name, uniform in [-0.1, 0.1] (the planner reads only their shapes).
struct RandomTensors {
  std::map<std::string, Tensor> store;
  std::mt19937 rng{3};
  TensorView operator()(const std::string& name, const Shape& shape) {
    auto it = store.find(name);
    if (it != store.end()) return it->second.view();
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (float& x : v) x = u(rng);
    Tensor t = Tensor::empty(shape, DType::BF16);
    convert_from_f32(v.data(), DType::BF16, t.data(), t.numel());
    return store.emplace(name, std::move(t)).first->second.view();
  }
};

// The runner's workspace for Qwen2-VL-7B's tower in bf16 (one block: the activations do not
// depend on the depth) grows linearly with the patches (beyond a fixed scratch) and, at the
// default --max-media-patches, fits beside the weights and the KV cache on one GPU.
TEST(CudaVisionMemoryPlan, Qwen2VL7BWorkspaceIsLinearInThePatchesAndFits) {
  VLM_REQUIRE_GPU();
  Qwen2VisionConfig c;  // the defaults: Qwen2-VL-7B's vision tower
  c.depth = 1;
  RandomTensors weights;
  const Qwen2VisionEncoder host(c, [&weights](const std::string& n, const Shape& sh) { return weights(n, sh); }, "");
  CudaQwen2VisionRunner t(host, DType::BF16);
  const int64_t w8 = t.workspace_bytes(8192), w16 = t.workspace_bytes(16384), w32 = t.workspace_bytes(32768);
  EXPECT_GT(w16, w8);
  EXPECT_NEAR(double(w32 - w16), 2.0 * double(w16 - w8), 64.0);  // linear in the patches
  std::printf("[ plan ] Qwen2-VL-7B tower, bf16: %.2f GiB of activations for 32768 patches\n",
              static_cast<double>(w32) / (1 << 30));
  EXPECT_LT(w32, int64_t(8) << 30);  // beside the weights and the KV cache on one GPU
}

TEST(CudaVisionMemoryPlan, ItemsBeyondTheReservationAreA400) {
  PlanOnlyTower t;
  t.reserve(32768);  // the default --max-media-patches: a 64-frame 448x448 video
  MediaPixels video;
  video.modality = Modality::Video;
  video.grid_thw = {32, 32, 32};  // 64 frames of 448x448
  EXPECT_NO_THROW(check_vision_fits(t, video, 0));
  video.grid_thw = {64, 32, 32};  // 128 frames
  try {
    check_vision_fits(t, video, 1);
    ADD_FAILURE() << "a 128-frame video was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    const std::string what = e.what();
    EXPECT_NE(what.find("video 1 needs 65536"), std::string::npos) << what;
    EXPECT_NE(what.find("--max-media-patches"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace vlm::testing
