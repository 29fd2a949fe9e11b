// The copy engine's bulk copies and the mbarriers they complete on (sm_90), for the MoE decode
// kernel that fills shared memory with them (moe_pair_bulk.cu). Device code only; below sm_90
// bulk_copy traps (its *_supported says false).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/mma_tile.cuh"  // tile::smem_addr

namespace vlm::cuda::bulk {

// Initializes bar for `count` arrivals, and orders the init before later uses by the async proxy
// (each initializing thread runs it; a block barrier before any other thread uses bar).
__device__ __forceinline__ void bar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tile::smem_addr(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(tile::smem_addr(bar)) : "memory");
}
// One arrival that also announces `bytes` of copies completing on bar in this phase.
__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tile::smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` of bar has completed (phases 0, 1, 2, ... alternate).
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(tile::smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst by the
// copy engine, completing on bar (which must expect them).
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          tile::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(tile::smem_addr(bar))
      : "memory");
#else
  __trap();
#endif
}

}  // namespace vlm::cuda::bulk
