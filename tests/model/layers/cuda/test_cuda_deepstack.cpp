// DeepStack on the GPU's layers (Qwen3-VL): the CUDA embedding puts a step's media rows with all
// their planes on the device once (host rows of use[], and device runs), plane 0 into x, and
// CudaRowOps::add_override_plane adds plane p at those rows, against the CPU's embedding and
// add_override_plane on the same rows: f32, bit for bit (copies and one f32 add per value on
// both sides). Host rows and device runs give the same x; a step without media rows adds nothing.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/core/tensor.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/layers/cuda/cuda_step.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr int64_t kT = 7, kV = 11, kPlanes = 3;

std::vector<float> normal(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& x : v) x = d(rng);
  return v;
}

struct Case {
  int64_t C;
  const char* what;
};

class CudaDeepStack : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    VLM_REQUIRE_GPU();
    C_ = GetParam().C;
    table_ = Tensor::empty(Shape{kV, C_}, DType::F32);
    const std::vector<float> t = normal(static_cast<size_t>(kV * C_), 1);
    std::memcpy(table_.data(), t.data(), t.size() * 4);
    embeds_ = normal(static_cast<size_t>(kT * kPlanes * C_), 2);  // [T, planes * C]
    b_.token_ids = {3, 0, 0, 7, 0, 0, 0};
    b_.positions = {0, 1, 2, 3, 4, 5, 6};
    b_.slot_mapping = b_.positions;
    b_.logits_indices = {6};
  }
  WeightSource source() const {
    const Tensor* t = &table_;
    return WeightSource([t](const std::string&, const Shape&) { return t->view(); }, "");
  }

  // The CPU's embedding then planes 1 .. planes - 1 added (as LlamaDecoder does after layers 0, 1).
  std::vector<float> cpu(const EmbeddingOverride& ov) {
    CpuLayers layers;
    const auto emb = layers.embedding(source(), {"embed", {kV, C_}});
    const auto ops = layers.row_ops();
    const ActivationPlan plan;
    std::vector<float> logits, x(static_cast<size_t>(kT * C_));
    CpuStep s(plan, b_, {}, ov, logits);
    emb->forward(s, Act{x.data(), kT, C_, DType::F32});
    for (int64_t p = 1; p < ov.num_planes; ++p) ops->add_override_plane(s, p, Act{x.data(), kT, C_, DType::F32});
    return x;
  }

  std::vector<float> gpu(const EmbeddingOverride& ov) {
    CudaLayers layers(DType::F32);
    const auto emb = layers.embedding(source(), {"embed", {kV, C_}});
    const auto ops = layers.row_ops();
    int64_t epoch = 0;
    CudaScratch pool(&epoch);
    cuda::DeviceBuffer ids = to_device(b_.token_ids), x;
    x.resize(static_cast<size_t>(kT * C_) * 4);
    CudaStep s;
    s.stream = nullptr;
    s.dt = DType::F32;
    s.T = kT;
    s.R = 1;
    s.override = &ov;
    s.ids = ids.as<int32_t>();
    s.pool = &pool;
    emb->forward(s, Act{x.get(), kT, C_, DType::F32});
    for (int64_t p = 1; p < kPlanes; ++p) ops->add_override_plane(s, p, Act{x.get(), kT, C_, DType::F32});
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
    return to_host<float>(x, static_cast<size_t>(kT * C_));
  }

  int64_t C_ = 0;
  Tensor table_;
  std::vector<float> embeds_;
  ForwardBatch b_;
};

TEST_P(CudaDeepStack, HostRowsAndDeviceRunsMatchTheCpu) {
  const std::vector<uint8_t> use = {0, 1, 1, 0, 1, 1, 1};  // two runs of media rows
  EmbeddingOverride host;
  host.embeds = embeds_.data();
  host.use = use.data();
  host.num_planes = kPlanes;
  const std::vector<float> want = cpu(host);
  const std::vector<float> got_host = gpu(host);
  ASSERT_EQ(got_host.size(), want.size());
  EXPECT_EQ(std::memcmp(got_host.data(), want.data(), want.size() * 4), 0) << GetParam().what << ": host rows";

  // The same media rows encoded "on the GPU": [5, planes * C] in device memory, as two runs.
  const int64_t W = kPlanes * C_;
  std::vector<float> media;
  for (int64_t t : {1, 2, 4, 5, 6}) media.insert(media.end(), embeds_.begin() + t * W, embeds_.begin() + (t + 1) * W);
  cuda::DeviceBuffer dmedia = to_device(media);
  const DeviceRowRun runs[2] = {{1, dmedia.as<float>(), 2}, {4, dmedia.as<float>() + 2 * W, 3}};
  EmbeddingOverride dev;
  dev.num_planes = kPlanes;
  dev.device_runs = runs;
  dev.num_device_runs = 2;
  const std::vector<float> got_dev = gpu(dev);
  EXPECT_EQ(std::memcmp(got_dev.data(), want.data(), want.size() * 4), 0) << GetParam().what << ": device runs";

  // Rows that are not media rows hold their token embedding alone.
  EmbeddingOverride none;
  none.num_planes = kPlanes;
  const std::vector<float> plain = gpu(none);
  for (int64_t t = 0; t < kT; ++t)
    EXPECT_EQ(std::memcmp(plain.data() + t * C_, static_cast<const float*>(table_.data()) + b_.token_ids[static_cast<size_t>(t)] * C_,
                          static_cast<size_t>(C_) * 4),
              0)
        << "row " << t;
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaDeepStack,
                         ::testing::Values(Case{64, "C 64 (float4 adds)"}, Case{37, "C 37 (scalar adds)"}),
                         [](const ::testing::TestParamInfo<Case>& i) { return "C" + std::to_string(i.param.C); });

}  // namespace
}  // namespace vlm::testing
