// NcclCommunicator (kernels/cuda/core/nccl_communicator.h) against the naive host reference: each
// rank's buffer on its GPU, one host thread per rank, all-reduce (f32, bf16) and all-gather, then
// the same all-reduce captured in a CUDA graph and replayed. Skips below two GPUs or without NCCL.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "kernels/core/thread_communicator.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/nccl_communicator.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

#define VLM_REQUIRE_TWO_GPUS_AND_NCCL()                                                              \
  do {                                                                                               \
    VLM_REQUIRE_GPU();                                                                               \
    if (cuda::visible_gpus() < 2) GTEST_SKIP() << "tensor parallelism needs two GPUs";              \
    std::string why_;                                                                                \
    if (cuda::nccl_api(&why_) == nullptr) GTEST_SKIP() << "NCCL not found: " << why_;               \
  } while (0)

// Each rank's host input [count] of dt, all-reduced on the GPUs (graph: captured and replayed
// twice, on the same input each time); returns every rank's result.
std::vector<std::vector<char>> gpu_all_reduce(const std::vector<std::vector<char>>& in, int64_t count, DType dt, bool graph) {
  const int n = static_cast<int>(in.size());
  std::vector<int> devs;
  for (int r = 0; r < n; ++r) devs.push_back(r);
  auto group = std::make_shared<cuda::NcclGroup>(devs);
  std::vector<std::vector<char>> out(in.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      VLM_CUDA_CHECK(cudaSetDevice(r));
      cuda::NcclCommunicator comm(group, r);
      const size_t bytes = in[static_cast<size_t>(r)].size();
      void* d = nullptr;
      cudaStream_t s = nullptr;
      VLM_CUDA_CHECK(cudaMalloc(&d, bytes));
      VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      VLM_CUDA_CHECK(cudaMemcpy(d, in[static_cast<size_t>(r)].data(), bytes, cudaMemcpyHostToDevice));
      if (!graph) {
        comm.all_reduce_sum(d, count, dt, s);
      } else {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t ge = nullptr;
        VLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        comm.all_reduce_sum(d, count, dt, s);
        VLM_CUDA_CHECK(cudaStreamEndCapture(s, &g));
        VLM_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
        for (int k = 0; k < 2; ++k) {  // the input again before each replay
          VLM_CUDA_CHECK(cudaMemcpyAsync(d, in[static_cast<size_t>(r)].data(), bytes, cudaMemcpyHostToDevice, s));
          VLM_CUDA_CHECK(cudaGraphLaunch(ge, s));
        }
        VLM_CUDA_CHECK(cudaStreamSynchronize(s));
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      }
      out[static_cast<size_t>(r)].resize(bytes);
      VLM_CUDA_CHECK(cudaMemcpyAsync(out[static_cast<size_t>(r)].data(), d, bytes, cudaMemcpyDeviceToHost, s));
      VLM_CUDA_CHECK(cudaStreamSynchronize(s));
      cudaFree(d);
      cudaStreamDestroy(s);
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(NcclCommunicator, AllReduceMatchesTheNaiveSumEagerAndInAGraph) {
  VLM_REQUIRE_TWO_GPUS_AND_NCCL();
  const int n = std::min(cuda::visible_gpus(), 4);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (bool graph : {false, true}) {
      const int64_t count = 100003;
      std::mt19937 rng(3);
      std::normal_distribution<float> d;
      std::vector<std::vector<char>> in(static_cast<size_t>(n));
      for (auto& b : in) {
        std::vector<float> v(static_cast<size_t>(count));
        for (float& x : v) x = d(rng);
        b.resize(static_cast<size_t>(count) * dtype_size(dt));
        convert_from_f32(v.data(), dt, b.data(), count);
      }
      std::vector<std::vector<char>> want = in;
      std::vector<void*> ptrs;
      for (auto& w : want) ptrs.push_back(w.data());
      naive_all_reduce_sum(ptrs, count, dt);
      const auto got = gpu_all_reduce(in, count, dt, graph);
      // Two ranks: one rounding of a + b, as the reference's. More: NCCL's ring order differs,
      // so within a few roundings of the dtype.
      const double tol = n == 2 ? 0.0 : (dt == DType::F32 ? 1e-5 : 2e-2);
      for (int r = 0; r < n; ++r) {
        double worst = 0;
        for (int64_t i = 0; i < count; ++i) {
          const float g = load_as_f32(got[static_cast<size_t>(r)].data(), dt, i);
          const float w = load_as_f32(want[static_cast<size_t>(r)].data(), dt, i);
          worst = std::max(worst, std::abs(static_cast<double>(g) - w) / (std::abs(static_cast<double>(w)) + 1e-3));
        }
        EXPECT_LE(worst, tol) << dtype_name(dt) << (graph ? " graph" : " eager") << " rank " << r << " of " << n;
      }
    }
  }
}

TEST(NcclCommunicator, AllGatherPutsTheRanksInRankOrder) {
  VLM_REQUIRE_TWO_GPUS_AND_NCCL();
  const int n = 2;
  const int64_t count = 1000;
  auto group = std::make_shared<cuda::NcclGroup>(std::vector<int>{0, 1});
  std::vector<std::vector<float>> out(n, std::vector<float>(static_cast<size_t>(n * count)));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      VLM_CUDA_CHECK(cudaSetDevice(r));
      cuda::NcclCommunicator comm(group, r);
      std::vector<float> in(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) in[static_cast<size_t>(i)] = static_cast<float>(r * 10000 + i);
      void *din = nullptr, *dout = nullptr;
      VLM_CUDA_CHECK(cudaMalloc(&din, count * 4));
      VLM_CUDA_CHECK(cudaMalloc(&dout, n * count * 4));
      VLM_CUDA_CHECK(cudaMemcpy(din, in.data(), count * 4, cudaMemcpyHostToDevice));
      comm.all_gather(din, dout, count, DType::F32, nullptr);
      VLM_CUDA_CHECK(cudaMemcpy(out[static_cast<size_t>(r)].data(), dout, n * count * 4, cudaMemcpyDeviceToHost));
      cudaFree(din);
      cudaFree(dout);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(q * count + i)], static_cast<float>(q * 10000 + i));
}

}  // namespace
}  // namespace vlm
