#include "kernels/cpu_features.h"

#include <atomic>

namespace vlm {

namespace {
std::atomic<bool> g_avx512_enabled{true};
}  // namespace

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  // GCC's checks include the OS (XCR0) support of the AVX-512 register state.
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") &&
                          __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

bool use_avx512() { return g_avx512_enabled.load(std::memory_order_relaxed) && cpu_has_avx512(); }

void set_avx512_enabled(bool enabled) { g_avx512_enabled.store(enabled, std::memory_order_relaxed); }

}  // namespace vlm
