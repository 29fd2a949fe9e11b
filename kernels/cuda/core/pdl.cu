#include "kernels/cuda/core/pdl.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "kernels/core/env_switch.h"
#include "kernels/cuda/core/pdl.cuh"

namespace vlm::cuda {

namespace {

// Compiled like every kernel of the library: its PTX version says whether the griddepcontrol
// instructions above were compiled in (sm_90 or later).
__global__ void pdl_probe_kernel() {
  pdl_wait();
  pdl_trigger();
}

thread_local bool t_active = false;
std::atomic<int64_t> g_launches{0};

}  // namespace

bool pdl_supported(int dev) {
  constexpr int kDevices = 16;
  static std::mutex mu;
  static int known[kDevices] = {};  // 0 unknown, 1 yes, 2 no
  if (dev < 0 || dev >= kDevices) return false;
  std::lock_guard<std::mutex> lock(mu);
  if (known[dev] == 0) {
    int major = 0;
    cudaFuncAttributes attr = {};
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    cudaFuncGetAttributes(&attr, pdl_probe_kernel) == cudaSuccess;
    known[dev] = ok && major >= 9 && attr.ptxVersion >= 90 && attr.binaryVersion >= 90 ? 1 : 2;
  }
  return known[dev] == 1;
}

bool pdl_env() {
  static const bool on = env_switch("VLM_CUDA_PDL", false);
  return on;
}

int64_t pdl_prefetch_bytes() {
  static const int64_t bytes = [] {
    const char* e = std::getenv("VLM_CUDA_PDL_PREFETCH_MB");
    const long mb = e != nullptr && *e != '\0' ? std::strtol(e, nullptr, 10) : 16;
    return int64_t(mb < 0 ? 0 : (mb > 1024 ? 1024 : mb)) << 20;
  }();
  return bytes;
}

PdlScope::PdlScope(bool on) : prev_(t_active) { t_active = on; }
PdlScope::~PdlScope() { t_active = prev_; }
bool pdl_active() { return t_active; }

int64_t pdl_launches() { return g_launches.load(std::memory_order_relaxed); }
void note_pdl_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }

}  // namespace vlm::cuda
