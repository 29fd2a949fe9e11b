#include "kernels/core/cpu_features.h"

#include <atomic>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace vlm {

namespace {
std::atomic<bool> g_avx512_enabled{true};

#if defined(__x86_64__) || defined(__i386__)
// CPUID.1:ECX.F16C[bit 29]; clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#endif
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
                          __builtin_cpu_supports("avx512vl") && cpu_has_f16c() &&
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
