// Helpers of the CUDA attention benchmarks (bench_cuda_attention and its cudnn_inmodel_bench
// rows): exit on a CUDA error, random bf16 device buffers, int32 uploads, the median device time
// of a call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/core/dtype.h"

namespace vlm::bench {

inline void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Device buffer of n bf16 values, filled from a random host pattern (not zeros) in [-amp, amp].
inline void* random_bf16(size_t n, uint32_t seed, float amp = 1.f) {
  void* p = nullptr;
  ok(cudaMalloc(&p, n * 2), "malloc");
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-amp, amp);
  const size_t pat = std::min<size_t>(n, size_t(1) << 22);
  std::vector<uint16_t> h(pat);
  for (auto& x : h) x = vlm::f32_to_bf16(uni(rng));
  for (size_t i = 0; i < n; i += pat)
    ok(cudaMemcpy(static_cast<uint16_t*>(p) + i, h.data(), std::min(pat, n - i) * 2, cudaMemcpyHostToDevice), "fill");
  return p;
}

inline int32_t* upload(const std::vector<int32_t>& v) {
  int32_t* p = nullptr;
  ok(cudaMalloc(&p, v.size() * 4), "malloc");
  ok(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "copy");
  return p;
}

// Median over reps of the time per call, each rep timing `batch` calls queued back to back (so a
// short kernel's time is the device's, not the host's launch latency).
template <class Fn>
double median_ms(int warmup, int reps, int batch, Fn&& fn) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    ok(cudaEventRecord(a), "record");
    for (int j = 0; j < batch; ++j) fn(i * batch + j);
    ok(cudaEventRecord(b), "record");
    ok(cudaEventSynchronize(b), "sync");
    ok(cudaEventElapsedTime(&ms[i], a, b), "elapsed");
    ms[i] /= batch;
  }
  ok(cudaGetLastError(), "launch");
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[reps / 2];
}

}  // namespace vlm::bench
