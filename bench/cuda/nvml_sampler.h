// NvmlSampler: the GPU's SM clock, power draw and clock-limit reasons sampled every ~1 ms by a
// host thread between start() and stop() (a measuring aid for the benchmarks: whether a kernel
// ran slower because the chip lowered its clock). NVML (libnvidia-ml.so.1, part of the driver) is
// dlopened; where it is absent ok() is false and stop() returns zero samples. The device is the
// one CUDA calls `cuda_device` (matched by PCI bus id).
// Reasons: NVML's clock-event bits (nvmlClocksEventReason*): 0x1 idle, 0x2 application clocks,
// 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace vlm::bench {

class NvmlSampler {
 public:
  struct Stats {
    int samples = 0;
    double mean_sm_mhz = 0, mean_power_w = 0;
    unsigned min_sm_mhz = 0, max_sm_mhz = 0;
    unsigned long long reasons = 0;  // OR of every sample's reasons
  };

  explicit NvmlSampler(int cuda_device = 0) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return;
    auto init = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    power_ = reinterpret_cast<int (*)(void*, unsigned*)>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(dlsym(lib_, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (reasons_ == nullptr)
      reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(dlsym(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    char bus[64] = {0};
    if (init == nullptr || by_bus == nullptr || clock_ == nullptr || power_ == nullptr || init() != 0 ||
        cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_device) != cudaSuccess || by_bus(bus, &dev_) != 0) {
      dev_ = nullptr;
      return;
    }
    thread_ = std::thread([this] { loop(); });
  }
  ~NvmlSampler() {
    quit_ = true;
    if (thread_.joinable()) thread_.join();
    // NVML stays initialized (process exit cleans up); the library stays loaded for the same reason.
  }
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  bool ok() const { return dev_ != nullptr; }
  void start() {
    std::lock_guard<std::mutex> g(mu_);
    acc_ = Acc{};
    active_ = true;
  }
  Stats stop() {
    std::lock_guard<std::mutex> g(mu_);
    active_ = false;
    Stats s;
    s.samples = acc_.n;
    if (acc_.n > 0) {
      s.mean_sm_mhz = acc_.mhz / acc_.n;
      s.mean_power_w = acc_.mw / acc_.n / 1000.0;
      s.min_sm_mhz = acc_.min_mhz;
      s.max_sm_mhz = acc_.max_mhz;
      s.reasons = acc_.reasons;
    }
    return s;
  }

 private:
  struct Acc {
    int n = 0;
    double mhz = 0, mw = 0;
    unsigned min_mhz = ~0u, max_mhz = 0;
    unsigned long long reasons = 0;
  };
  void loop() {
    while (!quit_) {
      if (active_) {
        unsigned mhz = 0, mw = 0;
        unsigned long long why = 0;
        const bool got = clock_(dev_, /*NVML_CLOCK_SM=*/1, &mhz) == 0 && power_(dev_, &mw) == 0;
        if (reasons_ != nullptr && reasons_(dev_, &why) != 0) why = 0;
        std::lock_guard<std::mutex> g(mu_);
        if (got && active_) {
          ++acc_.n;
          acc_.mhz += mhz;
          acc_.mw += mw;
          acc_.min_mhz = std::min(acc_.min_mhz, mhz);
          acc_.max_mhz = std::max(acc_.max_mhz, mhz);
          acc_.reasons |= why;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void* lib_ = nullptr;
  void* dev_ = nullptr;  // nvmlDevice_t
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*reasons_)(void*, unsigned long long*) = nullptr;
  std::atomic<bool> quit_{false}, active_{false};
  std::mutex mu_;
  Acc acc_;
  std::thread thread_;
};

}  // namespace vlm::bench
