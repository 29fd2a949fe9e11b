// The GPU vision towers' devices (CudaVisionTower::device(), issue 42): a tower lives on the
// device current when it is built and every call runs there whatever device the caller left
// current (session 17: a TP=1 engine's tower built on GPU 1, the device a destroyed TP engine had
// left current, was called with GPU 0's stream: an invalid resource handle). On 2 GPUs (skipped
// with fewer): the Qwen2-VL fixture tower built on GPU 1 and called (eager, and lazy rows asked
// for) with GPU 0 current gives the bytes of the tower built on GPU 0, and leaves GPU 0 current;
// the Qwen3-VL fixture's Frames8 items (GPU preprocessing) likewise, and over both GPUs as the
// data-parallel encoder with GPU 1 current at the call; a data-parallel encoder refuses a tower
// listed on another device than it was built on.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "engine/cuda/cuda_media_encoder.h"
#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/cuda_device_guard.h"
#include "model/families/qwen2_vl.h"
#include "model/families/qwen3_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/qwen3vl_fixture.h"
#include "tests/support/random_image.h"

namespace vlm::testing {
namespace {

const std::string kFix = VLM_FIXTURES_DIR;

#define VLM_REQUIRE_TWO_GPUS()                                                        \
  do {                                                                                \
    VLM_REQUIRE_GPU();                                                                \
    if (cuda::visible_gpus() < 2) GTEST_SKIP() << "the device tests need two GPUs"; \
  } while (0)

// A non-blocking stream of `device` (made there; the caller's device restored).
struct DeviceStream {
  int device;
  cudaStream_t s = nullptr;
  explicit DeviceStream(int d) : device(d) {
    const cuda::CudaDeviceGuard on(d);
    VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  ~DeviceStream() {
    const cuda::CudaDeviceGuard on(device);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
};

// Rows [rows, C] f32 of a device allocation (any device), after both devices are idle; the
// caller's device restored.
std::vector<float> download(const DeviceEmbeddings& e, int64_t C) {
  const cuda::CudaDeviceGuard restore;
  for (int d : {0, 1}) {
    VLM_CUDA_CHECK(cudaSetDevice(d));
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<float> out(static_cast<size_t>(e.rows * C));
  VLM_CUDA_CHECK(cudaMemcpy(out.data(), e.data, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::unique_ptr<CudaMediaEncoder> encoder_on(int device, const Model& model, DType dt, int64_t step) {
  const cuda::CudaDeviceGuard on(device);
  return CudaMediaEncoder::make(model, dt, 4096, step);
}

std::vector<MediaPixels> qwen2_items() {
  std::mt19937 g(23);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 8; ++i) frames.push_back(random_image(85, 57, g));  // 4 temporal groups
  const MediaPixels video = qwen2vl_frames8(frames, Qwen2VLPreprocessConfig{}, Modality::Video);
  const MediaPixels image = qwen2vl_frames8({random_image(100, 70, g)}, Qwen2VLPreprocessConfig{}, Modality::Image);
  return {image, video, to_rows_form(video)};
}

TEST(CudaVisionTowerDevice, Qwen2VLTowerOnGpu1RunsWithGpu0Current) {
  VLM_REQUIRE_TWO_GPUS();
  const std::vector<MediaPixels> items = qwen2_items();
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  const DeviceStream s0(0), s1(1);
  VLM_CUDA_CHECK(cudaSetDevice(0));
  const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/qwen2_vl_tiny");
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t step : {int64_t(0), int64_t(48)}) {  // eager; lazy units of 2 temporal groups
      SCOPED_TRACE(std::string(dtype_name(dt)) + " step_patches " + std::to_string(step));
      auto ref_enc = encoder_on(0, *model, dt, step);
      auto enc = encoder_on(1, *model, dt, step);
      EXPECT_EQ(ref_enc->tower().device(), 0);
      ASSERT_EQ(enc->tower().device(), 1);
      ASSERT_EQ(cuda::current_device(), 0) << "building a tower on GPU 1 left it current";
      const auto ref_e = ref_enc->encode(ptrs, {}, s0.s);
      ref_e->ensure_rows(0, ref_e->rows);
      const int64_t C = ref_enc->tower().out_features();
      const std::vector<float> ref = download(*ref_e, C);
      const auto e = enc->encode(ptrs, {}, s1.s);  // GPU 0 current, GPU 1's tower and stream
      EXPECT_EQ(cuda::current_device(), 0);
      e->ensure_rows(0, e->rows / 2);  // lazy units asked for with GPU 0 current
      e->ensure_rows(0, e->rows);
      EXPECT_EQ(cuda::current_device(), 0);
      EXPECT_TRUE(same_bytes(download(*e, C), ref));
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    }
}

TEST(CudaVisionTowerDevice, Qwen3VLFrames8OnGpu1AndOverBothGpusFromEitherDevice) {
  VLM_REQUIRE_TWO_GPUS();
  if (!qwen3vl_fixture_present()) GTEST_SKIP() << "fixture tests/fixtures/qwen3vl not generated";
  VLM_CUDA_CHECK(cudaSetDevice(0));
  const auto model = Qwen3VLModel::load(qwen3vl_model_dir());
  const Qwen3VLReference ref = qwen3vl_reference();
  const DeviceStream s0(0), s1(1);
  int cases = 0;
  for (int k = 0; ref.has("p" + std::to_string(k) + ".ids"); ++k) {
    const Qwen3VLPromptItems pi = qwen3vl_frames8_items(*model, ref, k);
    if (pi.items.empty()) continue;
    ++cases;
    std::vector<const MediaPixels*> ptrs;
    for (const MediaPixels& m : pi.items) ptrs.push_back(&m);
    SCOPED_TRACE("p" + std::to_string(k));
    auto ref_enc = encoder_on(0, *model, DType::F32, 0);
    const int64_t C = ref_enc->tower().out_features();
    const std::vector<float> want = download(*ref_enc->encode(ptrs, {}, s0.s), C);
    // One tower on GPU 1, called with GPU 0 current.
    auto enc = encoder_on(1, *model, DType::F32, 0);
    ASSERT_EQ(enc->tower().device(), 1);
    const std::vector<float> one = download(*enc->encode(ptrs, {}, s1.s), C);
    EXPECT_TRUE(same_bytes(one, want)) << "GPU 1's tower";
    // Both GPUs (whole items spread: the GEMMs' rounding), called with GPU 1 current.
    const int devices[] = {0, 1};
    auto dp = CudaMediaEncoder::make(*model, DType::F32, 4096, 0, devices);
    ASSERT_EQ(dp->num_devices(), 2);
    VLM_CUDA_CHECK(cudaSetDevice(1));
    const CudaMediaEncoder::Destination dests[] = {{0, s0.s}, {1, s1.s}};
    const auto both = dp->encode(ptrs, {}, dests);
    EXPECT_EQ(cuda::current_device(), 1);
    VLM_CUDA_CHECK(cudaSetDevice(0));
    for (int d = 0; d < 2; ++d) {
      const std::vector<float> got = download(*both[static_cast<size_t>(d)], C);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(rel_error(got, want), 1e-5) << "destination " << d;
    }
  }
  EXPECT_GE(cases, 1);
}

TEST(CudaVisionTowerDevice, DataParallelRefusesATowerOfAnotherDevice) {
  VLM_REQUIRE_TWO_GPUS();
  VLM_CUDA_CHECK(cudaSetDevice(0));
  const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/qwen2_vl_tiny");
  std::vector<std::unique_ptr<CudaVisionTower>> towers;
  for (int i = 0; i < 2; ++i) {  // both built on GPU 0
    auto t = std::make_unique<CudaQwen2VisionRunner>(*std::get<Qwen2VisionBinding>(model->vision_binding()).encoder,
                                                     DType::F32);
    t->reserve(256);
    towers.push_back(std::move(t));
  }
  try {
    CudaVisionDataParallel dp({0, 1}, std::move(towers));
    FAIL() << "a tower built on GPU 0 listed for GPU 1 must be refused";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("the tower for device 1 was built on device 0"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cuda::current_device(), 0);
}

}  // namespace
}  // namespace vlm::testing
