// The data-parallel media encoder (issue 42; CudaVisionDataParallel under CudaMediaEncoder made
// with devices), on 2 GPUs (skipped with fewer): the Qwen2-VL fixtures' image and video (Frames8
// and Rows forms), in groups of 2 temporal groups so both devices get work, eager and in lazy
// units: the rows over devices {0, 1} delivered to device 0, and to both devices, have the same
// bytes as the one-device encoder's (same group size); a lazy encode asked in pieces, from the
// second destination first, too; one device delivering to both (mm_encoder_devices 1 under
// tensor parallelism) too; LLaVA's whole images spread over the devices equal the one-device
// batch within 1e-5 (f32).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/cuda_media_encoder.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/families/llava.h"
#include "model/families/qwen2_vl.h"
#include "model/media/qwen2vl_frames.h"
#include "model/vision/cuda/cuda_qwen2_vision_runner.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random_image.h"

namespace vlm::testing {
namespace {

const std::string kFix = VLM_FIXTURES_DIR;
constexpr int64_t kGroup = 48;  // patches per tower group: 2 temporal groups of the 6x4-patch video

#define VLM_REQUIRE_TWO_GPUS()                                                          \
  do {                                                                                  \
    VLM_REQUIRE_GPU();                                                                  \
    int n_ = 0;                                                                         \
    VLM_CUDA_CHECK(cudaGetDeviceCount(&n_));                                            \
    if (n_ < 2) GTEST_SKIP() << n_ << " GPU(s) visible: the data-parallel tests need 2"; \
  } while (0)

// Rows [rows, C] f32 of a device allocation, after every device is idle.
std::vector<float> download(const DeviceEmbeddings& e, int64_t C) {
  for (int d : {0, 1}) {
    VLM_CUDA_CHECK(cudaSetDevice(d));
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
  }
  VLM_CUDA_CHECK(cudaSetDevice(0));
  std::vector<float> out(static_cast<size_t>(e.rows * C));
  VLM_CUDA_CHECK(cudaMemcpy(out.data(), e.data, out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

void set_group(const CudaVisionTower& t) {
  const_cast<CudaQwen2VisionRunner&>(dynamic_cast<const CudaQwen2VisionRunner&>(t)).set_group_patches(kGroup);
}

struct Streams {
  cudaStream_t s[2] = {nullptr, nullptr};
  Streams() {
    for (int d : {0, 1}) {
      VLM_CUDA_CHECK(cudaSetDevice(d));
      VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    }
    VLM_CUDA_CHECK(cudaSetDevice(0));
  }
  ~Streams() {
    for (int d : {0, 1}) {
      cudaSetDevice(d);
      cudaStreamSynchronize(s[d]);
      cudaStreamDestroy(s[d]);
    }
    cudaSetDevice(0);
  }
};

std::vector<MediaPixels> qwen_items() {
  std::mt19937 g(17);
  std::vector<RgbImage> frames;
  for (int i = 0; i < 16; ++i) frames.push_back(random_image(85, 57, g));  // 8 temporal groups of 6x4
  const MediaPixels video = qwen2vl_frames8(frames, Qwen2VLPreprocessConfig{}, Modality::Video);
  const MediaPixels image = qwen2vl_frames8({random_image(100, 70, g)}, Qwen2VLPreprocessConfig{}, Modality::Image);
  return {image, video, to_rows_form(video)};
}

TEST(CudaVisionDataParallel, Qwen2VLRowsOverTwoDevicesHaveTheOneDeviceBytes) {
  VLM_REQUIRE_TWO_GPUS();
  const std::vector<MediaPixels> items = qwen_items();
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  const Streams st;
  const int devices[] = {0, 1};
  for (const char* fixture : {"qwen2_vl_tiny", "qwen2_5_vl_tiny"}) {
    VLM_CUDA_CHECK(cudaSetDevice(0));
    const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/" + fixture);
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t step : {int64_t(0), int64_t(96)}) {  // eager; lazy units of 4 temporal groups
        SCOPED_TRACE(std::string(fixture) + " " + dtype_name(dt) + " step_patches " + std::to_string(step));
        auto one = CudaMediaEncoder::make(*model, dt, 4096, step);
        ASSERT_NE(one, nullptr);
        set_group(one->tower());
        const auto ref_e = one->encode(ptrs, {}, st.s[0]);
        ref_e->ensure_rows(0, ref_e->rows);
        const int64_t C = one->tower().out_features();
        const std::vector<float> ref = download(*ref_e, C);

        auto dp = CudaMediaEncoder::make(*model, dt, 4096, step, devices);
        ASSERT_NE(dp, nullptr);
        ASSERT_EQ(dp->num_devices(), 2);
        for (int i = 0; i < 2; ++i) set_group(dp->data_parallel()->tower(i));
        // Both devices get groups of the whole call (eager: one call of all three items).
        std::vector<FrameSlice> whole;
        for (const MediaPixels* p : ptrs) whole.push_back({p, 0, item_frames(*p)});
        const std::vector<size_t> b = dp->data_parallel()->assignment(whole);
        EXPECT_GT(b[1], b[0]);
        EXPECT_GT(b[2], b[1]);

        // To device 0 only (the one-device API on a data-parallel encoder).
        const auto e0 = dp->encode(ptrs, {}, st.s[0]);
        e0->ensure_rows(0, e0->rows);
        EXPECT_TRUE(same_bytes(download(*e0, C), ref));

        // To both devices; lazy rows asked in two pieces, through the second destination first.
        const CudaMediaEncoder::Destination dests[] = {{0, st.s[0]}, {1, st.s[1]}};
        const auto both = dp->encode(ptrs, {}, dests);
        ASSERT_EQ(both.size(), 2u);
        const int64_t half = both[0]->rows / 2;
        both[1]->ensure_rows(0, half);
        both[0]->ensure_rows(half, both[0]->rows);
        both[1]->ensure_rows(0, both[1]->rows);
        both[0]->ensure_rows(0, both[0]->rows);
        EXPECT_TRUE(same_bytes(download(*both[0], C), ref)) << "device 0";
        EXPECT_TRUE(same_bytes(download(*both[1], C), ref)) << "device 1";
      }
  }
  VLM_CUDA_CHECK(cudaSetDevice(0));
}

TEST(CudaVisionDataParallel, OneDeviceDeliversItsRowsToBoth) {
  VLM_REQUIRE_TWO_GPUS();
  const std::vector<MediaPixels> items = qwen_items();
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  const Streams st;
  VLM_CUDA_CHECK(cudaSetDevice(0));
  const auto model = Qwen2VLModel::load(kFix + "/qwen2vl/qwen2_vl_tiny");
  auto one = CudaMediaEncoder::make(*model, DType::BF16, 4096, 0);
  const auto ref_e = one->encode(ptrs, {}, st.s[0]);
  const int64_t C = one->tower().out_features();
  const std::vector<float> ref = download(*ref_e, C);
  const int device0[] = {0};
  auto dp = CudaMediaEncoder::make(*model, DType::BF16, 4096, 0, device0);
  ASSERT_EQ(dp->num_devices(), 1);
  const CudaMediaEncoder::Destination dests[] = {{1, st.s[1]}, {0, st.s[0]}};
  const auto both = dp->encode(ptrs, {}, dests);
  EXPECT_TRUE(same_bytes(download(*both[0], C), ref)) << "device 1";
  EXPECT_TRUE(same_bytes(download(*both[1], C), ref)) << "device 0";
}

TEST(CudaVisionDataParallel, LlavaImagesSpreadOverTwoDevicesMatchTheBatch) {
  VLM_REQUIRE_TWO_GPUS();
  const Streams st;
  VLM_CUDA_CHECK(cudaSetDevice(0));
  const auto model = LlavaModel::load(kFix + "/llava/llava_small");
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int S = model->image_size();
  std::vector<MediaPixels> items(3);  // normalized pixels [3, S, S]
  for (MediaPixels& m : items) {
    m.height = m.width = S;
    m.data.resize(static_cast<size_t>(3 * S * S));
    for (float& x : m.data) x = u(g);
  }
  std::vector<const MediaPixels*> ptrs;
  for (const MediaPixels& m : items) ptrs.push_back(&m);
  auto one = CudaMediaEncoder::make(*model, DType::F32, 4096, 0);
  const int64_t C = one->tower().out_features();
  const std::vector<float> ref = download(*one->encode(ptrs, {}, st.s[0]), C);
  const int devices[] = {0, 1};
  auto dp = CudaMediaEncoder::make(*model, DType::F32, 4096, 0, devices);
  const CudaMediaEncoder::Destination dests[] = {{0, st.s[0]}, {1, st.s[1]}};
  const auto both = dp->encode(ptrs, {}, dests);
  for (int k = 0; k < 2; ++k) {
    const std::vector<float> got = download(*both[static_cast<size_t>(k)], C);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_LE(rel_error(got, ref), 1e-5) << "destination " << k;
  }
}

}  // namespace
}  // namespace vlm::testing
