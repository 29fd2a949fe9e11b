#include "kernels/core/populated_vector.h"

#include <algorithm>
#include <cstdint>

#include <sys/mman.h>
#include <unistd.h>

#include "kernels/core/check.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14's value; older kernels answer EINVAL
#endif

namespace vlm {

void resize_populated(std::vector<float>& v, size_t n, ThreadPool* pool) {
  VLM_CHECK(v.empty(), "resize_populated on a vector of {} elements", v.size());
  constexpr size_t kMinBytes = size_t{4} << 20;
  const size_t bytes = n * sizeof(float);
  if (bytes >= kMinBytes) {
    v.reserve(n);  // a fresh allocation (mmap'ed by malloc at this size): no page touched yet
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(v.data()) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(v.data()) + bytes) / page * page;
    if (end > begin) {
      constexpr uintptr_t kPiece = uintptr_t{8} << 20;  // 8 MiB pieces, page-aligned
      const auto pieces = static_cast<int64_t>((end - begin + kPiece - 1) / kPiece);
      auto populate = [&](int64_t p0, int64_t p1) {
        const uintptr_t a = begin + static_cast<uintptr_t>(p0) * kPiece;
        const uintptr_t b = std::min(end, begin + static_cast<uintptr_t>(p1) * kPiece);
        (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_POPULATE_WRITE);  // best effort
      };
      if (pool) pool->parallel_for(pieces, populate);
      else populate(0, pieces);
    }
  }
  v.resize(n);
}

}  // namespace vlm
