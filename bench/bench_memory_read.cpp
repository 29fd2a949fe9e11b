// The machine's memory read rate: the roofline of a decode step, which streams every weight once
// (bench/peer_llamacpp.sh runs this beside the engines it compares).
//   bench_memory_read [--threads N (2)] [--mib M (1024)] [--reps R (10)] [--huge 0|1 (1)]
// N threads (std::thread) each sum their contiguous slice of an M MiB buffer (much larger than
// the last-level cache, written once beforehand so its pages exist), with 512-bit loads where
// the CPU has AVX-512 and 256-/128-bit ones otherwise. Prints one line per repetition and then
// "read GB/s: best B median D" (GB = 1e9 bytes) to stdout.
#include "kernels/core/x86_intrinsics.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "kernels/core/cpu_features.h"

namespace {

VLM_TARGET_AVX512 uint64_t sum_avx512(const uint64_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
  }
  uint64_t s = _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  for (; i < n; ++i) s += p[i];
  return s;
}

uint64_t sum_portable(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

long arg(int argc, char** argv, const char* name, long dflt) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::max(1L, std::strtol(argv[i + 1], nullptr, 10));
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(arg(argc, argv, "--threads", 2));
  const size_t bytes = static_cast<size_t>(arg(argc, argv, "--mib", 1024)) << 20;
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 10));
  const size_t n = bytes / sizeof(uint64_t);
  // 2 MiB-aligned and advised for transparent huge pages, as the decoder's weights are
  // (model/decoder/safetensors.cpp): with 4 KiB pages the read pays a TLB walk per 4 KiB and
  // measured ~1.3x below what the decode's GEMV streams. --huge 0 keeps 4 KiB pages.
  bool huge = true;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--huge") == 0) huge = std::strcmp(argv[i + 1], "0") != 0;
  const size_t alloc = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(2u << 20, alloc));
  if (!buf) {
    std::fprintf(stderr, "bench_memory_read: cannot allocate %zu bytes\n", bytes);
    return 1;
  }
  if (huge) ::madvise(buf, alloc, MADV_HUGEPAGE);  // advice only
  for (size_t i = 0; i < n; ++i) buf[i] = i;
  const bool avx512 = vlm::use_avx512();
  std::vector<double> rates;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    const size_t per = (n / threads) / 8 * 8;  // 64-byte aligned slices
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t b = t * per, len = t + 1 == threads ? n - b : per;
        sums[t] = avx512 ? sum_avx512(buf + b, len) : sum_portable(buf + b, len);
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uint64_t v : sums) sink = sink + v;
    rates.push_back(static_cast<double>(bytes) / s / 1e9);
    std::printf("rep %d: %.2f GB/s\n", r, rates.back());
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  std::printf("read GB/s: best %.2f median %.2f (threads %d, %zu MiB, %s loads, %s pages)\n", sorted.back(),
              sorted[sorted.size() / 2], threads, bytes >> 20, avx512 ? "512-bit" : "portable",
              huge ? "huge-page advised" : "4 KiB");
  std::free(buf);
  return 0;
}
