#include "kernels/cuda/core/cuda_check.h"

#include <fmt/format.h>

#include "kernels/core/check.h"
#include "kernels/core/device_error.h"

namespace vlm::cuda {

void cuda_failed(const char* file, int line, const char* what, cudaError_t err) {
  // A failed runtime call also leaves its error as the thread's last error: cleared here, so the
  // next VLM_CUDA_CHECK_LAUNCH does not blame a later, healthy launch for it (a sticky error, a
  // broken context, stays anyway). Session 17's TP media tests saw this: one test's failed
  // cudaEventRecord resurfaced as the next test's first kernel launch failing.
  (void)cudaGetLastError();
  throw DeviceError(fmt::format("{}:{}: {} failed: {} ({})", file, line, what, cudaGetErrorString(err),
                                  cudaGetErrorName(err)));
}

void unsupported_dtype(DType dt) {
  throw InternalError(fmt::format("no GPU kernel for dtype {}", dtype_name(dt)));
}

void precondition_failed(const char* what) {
  throw InternalError(fmt::format("GPU kernel precondition: {}", what));
}

int visible_gpus(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(err));
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

std::string describe_gpu(int dev) {
  cudaDeviceProp p{};
  VLM_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return fmt::format("{}, {} SMs, {:.1f} GiB, sm_{}{}", p.name, p.multiProcessorCount,
                     static_cast<double>(p.totalGlobalMem) / (1 << 30), p.major, p.minor);
}

}  // namespace vlm::cuda
