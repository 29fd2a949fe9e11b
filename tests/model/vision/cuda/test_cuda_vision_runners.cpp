// The vision towers written once (model/arch) over CudaLayers against the hand-written GPU towers
// they replace (docs/WRITTEN_ONCE.md step 5b), on the committed fixtures, f32 and bf16:
//  - CudaQwen2VisionRunner vs CudaQwen2Vision (Qwen2-VL, Qwen2.5-VL with windows): bit for bit,
//    through encode() (pixels converted to dt on the host, one group), through encode() in groups
//    of one frame (two streams, lanes 0 and 1), and through upload_pixels() + run() (f32 pixels
//    gathered and rounded on the GPU); bf16 with cuDNN on for equal segments in both;
//  - CudaLlavaVisionRunner vs CudaClipVision (CLIP with the class row dropped, two feature layers
//    for llava_small): bit for bit;
//  - the runners against Hugging Face's f32 rows (1e-4 relative in f32, 2e-2 in bf16), so that the
//    reference itself is checked in the same run.
// Bit for bit: the layers call the kernels the old towers called, in their order, with the same
// inputs; a difference is a bug to find (VLM_CUDA_PROFILE lists nothing here: compare the launch
// sequences with nsys), never a tolerance to widen.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "kernels/cuda/core/device_buffer.h"
#include "model/arch/llava_wiring.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "model/vision/cuda/cuda_clip_vision.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"
#include "model/vision/cuda/cuda_qwen2_vision.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/model/vision/cuda/cuda_vision_cases.h"
#include "tests/support/gpu_test.h"

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

}  // namespace
}  // namespace vlm::testing
