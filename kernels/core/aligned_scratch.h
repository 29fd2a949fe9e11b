// A growable, 64-byte-aligned float buffer that keeps its memory across calls: the per-thread
// tile scratch of the attention kernels (`thread_local`). get(n) may move the buffer: callers
// take the pointer again after asking for more.
#pragma once

#include <cstdlib>

#include "kernels/core/check.h"

namespace vlm {

struct AlignedScratch {
  float* data = nullptr;
  size_t cap = 0;

  AlignedScratch() = default;
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { std::free(data); }

  // At least n floats; the contents are not kept when the buffer grows.
  float* get(size_t n) {
    if (n > cap) {
      std::free(data);
      cap = (n + 15) / 16 * 16;
      data = static_cast<float*>(std::aligned_alloc(64, cap * sizeof(float)));
      VLM_CHECK(data, "out of memory for kernel scratch ({} floats)", cap);
    }
    return data;
  }
};

}  // namespace vlm
