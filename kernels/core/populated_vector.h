// Large output buffers made present before they are written. A fresh buffer of hundreds of MB
// (a long video's patch rows: 462 MB for 768 frames of 224x224) costs one page fault per 4 KiB
// page when it is first written; std::vector's zero-fill takes them all on one thread. On the
// shared VMs this project runs on, that took ~0.33 s for 462 MB, against ~0.19 s when the pages
// are made present in one madvise(MADV_POPULATE_WRITE) call and ~0.08 s with two threads each
// populating half (bench/RESULTS.md, "Host media: no frame kept, rows populated").
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/core/thread_pool.h"

namespace vlm {

// Resizes `v` to n elements, all 0.0f (as v.resize(n) on an empty vector), after making the
// new allocation's pages present in page-aligned pieces on `pool`'s threads (null: the calling
// thread). Precondition: v is empty. Where MADV_POPULATE_WRITE is missing (Linux < 5.14) or
// refused, the pages fault in during the zero-fill instead: same result, only slower. Small
// buffers (under 4 MiB) skip the madvise.
void resize_populated(std::vector<float>& v, size_t n, ThreadPool* pool);

}  // namespace vlm
