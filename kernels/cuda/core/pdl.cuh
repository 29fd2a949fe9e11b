// Programmatic dependent launch, the device side and the launcher (the contract and the switch are
// in pdl.h). A kernel written for PDL:
//   [prefetch of weights: prefetch_l2]   pdl_wait();   [pdl_trigger() early or late]   work
// Where to trigger: kernels that stream a whole weight (the decode GEMVs) trigger after their main
// loop, so the next kernel's CTAs take the SM slots this one frees and prefetch during its tail
// (not while this one still pushes a weight through L2); short kernels (embedding, RoPE + KV write,
// decode attention) trigger right after their wait, so the GEMV after them prefetches its weights
// while they run. Triggering after the wait (never before it) keeps at most one kernel ahead of the
// one running.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/pdl.h"

namespace vlm::cuda {

// Blocks until the kernels before this one on the stream have completed and their writes are
// visible (returns at once in a kernel launched without the attribute).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next PDL kernel on the stream launch once every CTA of this grid has called it (or
// exited).
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for `bytes` (rounded down to 16) from p (16-byte aligned), one instruction from one
// thread (a bulk prefetch, sm_90). A hint: no effect on results.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes >= 16) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes & ~15u) : "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...), with the PDL attribute when pdl_active(). Only for
// kernels that keep pdl.h's rules. Launch errors throw InternalError.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1] = {};
  if (pdl_active()) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    note_pdl_launch();
  }
  VLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...));
}

}  // namespace vlm::cuda
