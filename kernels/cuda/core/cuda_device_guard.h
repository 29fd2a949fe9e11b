// CudaDeviceGuard: makes a CUDA device current for a scope and restores the caller's on exit.
// Streams, events and allocations belong to the device current when they are made, and a kernel
// launched (or an event recorded) on a stream of another device fails with cudaErrorInvalid-
// ResourceHandle; the current device is per host thread and outlives the objects that set it
// (a tensor-parallel engine's ranks leave their last GPU current). So every object that works on
// one GPU records it when built and guards its construction and each entry with this.
// CudaDeviceGuard() only restores (for code that sets several devices in turn). The destructor
// does not throw: cudaSetDevice back to a device that was current cannot fail short of a broken
// driver, which the next checked call reports.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

class CudaDeviceGuard {
 public:
  CudaDeviceGuard() { VLM_CUDA_CHECK(cudaGetDevice(&previous_)); }
  explicit CudaDeviceGuard(int device) : CudaDeviceGuard() {
    if (device != previous_) VLM_CUDA_CHECK(cudaSetDevice(device));
  }
  ~CudaDeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) != cudaSuccess || now != previous_) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

  int previous() const { return previous_; }  // the device current when the guard was made

 private:
  int previous_ = 0;
};

// Restores, when destroyed, the device current at its mark() (nothing when never marked). As a
// class's first member (or in a base class) marked in the destructor's body, after which the body
// makes the object's device current, it hands the caller's device back once every other member
// has been freed on the object's device.
class DeviceRestorePoint {
 public:
  DeviceRestorePoint() = default;
  DeviceRestorePoint(const DeviceRestorePoint&) = delete;
  DeviceRestorePoint& operator=(const DeviceRestorePoint&) = delete;
  ~DeviceRestorePoint() {
    if (device_ >= 0) cudaSetDevice(device_);
  }
  void mark() {
    if (cudaGetDevice(&device_) != cudaSuccess) device_ = -1;
  }

 private:
  int device_ = -1;
};

// The device current on this thread (VLM_CUDA_CHECK on failure).
inline int current_device() {
  int d = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

// The device current on this thread, or -1 where there is none (no driver or no GPU; the error is
// cleared, not left for the next launch check).
inline int current_device_or_none() {
  int d = 0;
  if (cudaGetDevice(&d) == cudaSuccess) return d;
  (void)cudaGetLastError();
  return -1;
}

}  // namespace vlm::cuda
