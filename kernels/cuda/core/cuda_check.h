// CUDA error checks and device discovery for the GPU backend (kernels/cuda).
// VLM_CUDA_CHECK(call) throws InternalError naming the call, file:line and CUDA's message;
// VLM_CUDA_CHECK_LAUNCH() does the same for the last kernel launch (launch errors only: it does
// not synchronize).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

[[noreturn]] void cuda_failed(const char* file, int line, const char* what, cudaError_t err);
// Throws InternalError: a GPU kernel was asked for an element type it has no version of.
[[noreturn]] void unsupported_dtype(DType dt);
// Throws InternalError("GPU kernel precondition: WHAT").
[[noreturn]] void precondition_failed(const char* what);

// Number of CUDA devices this process can use; 0 when there is no driver or no device (never
// throws). The reason, when 0, goes to *why (may be null).
int visible_gpus(std::string* why = nullptr);

// "NVIDIA H100 80GB HBM3, 132 SMs, 79.1 GiB" for device `dev`.
std::string describe_gpu(int dev);

}  // namespace vlm::cuda

#define VLM_CUDA_CHECK(call)                                                          \
  do {                                                                                \
    const cudaError_t vlm_err_ = (call);                                              \
    if (vlm_err_ != cudaSuccess) [[unlikely]]                                         \
      ::vlm::cuda::cuda_failed(__FILE__, __LINE__, #call, vlm_err_);                  \
  } while (0)

#define VLM_CUDA_CHECK_LAUNCH() VLM_CUDA_CHECK(cudaGetLastError())
