// cuda::CudaDeviceGuard / DeviceRestorePoint (kernels/cuda/core/cuda_device_guard.h) and the
// error checks' clearing of the thread's last error (cuda_check.h): a guard makes its device
// current and restores the caller's, also when the scope throws; a restore point hands back the
// device current at mark(); a failed VLM_CUDA_CHECK leaves no error for the next launch check. On
// two GPUs, session 17's failure itself: an event made on GPU 1 recorded on a stream of GPU 0 is an
// invalid resource handle (and is not reported again afterwards). Skips without a GPU.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "kernels/core/check.h"
#include "kernels/core/device_error.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/cuda_device_guard.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

TEST(CudaDeviceGuard, SetsTheDeviceAndRestoresTheCallersEvenOnAThrow) {
  VLM_REQUIRE_GPU();
  const int last = cuda::visible_gpus() - 1;  // GPU 0 alone: the guard sets what is current
  VLM_CUDA_CHECK(cudaSetDevice(0));
  {
    const cuda::CudaDeviceGuard on(last);
    EXPECT_EQ(on.previous(), 0);
    EXPECT_EQ(cuda::current_device(), last);
  }
  EXPECT_EQ(cuda::current_device(), 0);
  try {
    const cuda::CudaDeviceGuard on(last);
    throw std::runtime_error("inside the scope");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(cuda::current_device(), 0);
  {
    const cuda::CudaDeviceGuard restore;  // restore only
    VLM_CUDA_CHECK(cudaSetDevice(last));
  }
  EXPECT_EQ(cuda::current_device(), 0);
  {
    cuda::DeviceRestorePoint point;
    point.mark();
    VLM_CUDA_CHECK(cudaSetDevice(last));
  }
  EXPECT_EQ(cuda::current_device(), 0);
  {
    const cuda::DeviceRestorePoint unmarked;  // restores nothing
    VLM_CUDA_CHECK(cudaSetDevice(last));
  }
  EXPECT_EQ(cuda::current_device(), last);
  VLM_CUDA_CHECK(cudaSetDevice(0));
}

TEST(CudaDeviceGuard, AFailedCheckLeavesNoErrorForTheNextLaunchCheck) {
  VLM_REQUIRE_GPU();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_THROW(VLM_CUDA_CHECK(cudaSetDevice(-3)), DeviceError);  // cudaErrorInvalidDevice: not sticky
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NO_THROW(VLM_CUDA_CHECK_LAUNCH());
}

TEST(CudaDeviceGuard, AnEventOfAnotherGpuOnAStreamIsAnInvalidHandleReportedOnce) {
  VLM_REQUIRE_GPU();
  if (cuda::visible_gpus() < 2) GTEST_SKIP() << "needs two GPUs";
  cudaEvent_t e1 = nullptr;
  cudaStream_t s0 = nullptr;
  {
    const cuda::CudaDeviceGuard on(1);
    VLM_CUDA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  }
  VLM_CUDA_CHECK(cudaSetDevice(0));
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  EXPECT_EQ(cudaEventRecord(e1, s0), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  try {
    VLM_CUDA_CHECK(cudaEventRecord(e1, s0));
    ADD_FAILURE() << "an event of GPU 1 recorded on GPU 0's stream";
  } catch (const DeviceError& err) {
    EXPECT_NE(std::string(err.what()).find("cudaErrorInvalidResourceHandle"), std::string::npos) << err.what();
  }
  EXPECT_NO_THROW(VLM_CUDA_CHECK_LAUNCH()) << "the caught failure came back at the next launch check";
  VLM_CUDA_CHECK(cudaStreamDestroy(s0));
  VLM_CUDA_CHECK(cudaEventDestroy(e1));
}

}  // namespace
}  // namespace vlm::testing
