// CudaEvent (kernels/cuda/core/cuda_event.h): a live event orders a stream after work recorded on
// another, synchronize_quietly waits for it, a moved-from event holds none and a moved-to one the
// original (destroying both leaves nothing to double-free: the next created event still works).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/cuda_event.h"
#include "kernels/cuda/core/device_buffer.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

TEST(CudaEvent, OrdersStreamsAndMovesOwnership) {
  VLM_REQUIRE_GPU();
  cudaStream_t a = nullptr, b = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  constexpr size_t kN = 1 << 22;
  std::vector<int> host(kN, 7), back(kN, 0);
  cuda::DeviceBuffer x(kN * sizeof(int)), y(kN * sizeof(int));
  {
    cuda::CudaEvent done;
    ASSERT_NE(done.get(), nullptr);
    // Stream a writes x; b copies x to y only after the event recorded on a.
    VLM_CUDA_CHECK(cudaMemcpyAsync(x.get(), host.data(), kN * sizeof(int), cudaMemcpyHostToDevice, a));
    VLM_CUDA_CHECK(cudaEventRecord(done, a));
    VLM_CUDA_CHECK(cudaStreamWaitEvent(b, done, 0));
    VLM_CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), kN * sizeof(int), cudaMemcpyDeviceToDevice, b));
    done.synchronize_quietly();
    EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
    cuda::CudaEvent moved(std::move(done));
    EXPECT_EQ(done.get(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    EXPECT_NE(moved.get(), nullptr);
    done.synchronize_quietly();  // none held: returns at once
    cuda::CudaEvent other;
    other = std::move(moved);
    EXPECT_EQ(moved.get(), nullptr);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(cudaEventQuery(other), cudaSuccess);
  }
  VLM_CUDA_CHECK(cudaStreamSynchronize(b));
  VLM_CUDA_CHECK(cudaMemcpy(back.data(), y.get(), kN * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
  cuda::CudaEvent fresh;  // the destroyed ones were each destroyed once
  VLM_CUDA_CHECK(cudaEventRecord(fresh, a));
  fresh.synchronize_quietly();
  EXPECT_EQ(cudaEventQuery(fresh), cudaSuccess);
  VLM_CUDA_CHECK(cudaStreamDestroy(a));
  VLM_CUDA_CHECK(cudaStreamDestroy(b));
}

}  // namespace
}  // namespace vlm::testing
