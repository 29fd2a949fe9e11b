// The Hopper (sm_90a) block-sparse attention kernel (block_sparse_sm90.cu) and the choice between
// it and the mma.sync kernel (block_sparse_attention.cu) that paged_block_sparse_attention makes.
//
// The sm_90a kernel runs the same plans (SparsePlanView: permuted rows and keys with causality by
// original position, gathered columns, every-key items in position order, split pieces and their
// combine, the resident grid's queue) with the same contract as the mma.sync kernel
// (cuda_block_sparse.h), for D = 128 and a bf16/f16 cache on an sm_90 GPU: one CTA = a producer
// warpgroup that copies each 64-key tile's K/V rows (gathered through the plan, cp.async) into
// 128-byte-swizzled shared memory beside the tile's key positions, and a consumer warpgroup that
// owns the item's 64 query rows: S = Q K^T by wgmma m64n64k16 (K from shared memory), the causal
// mask by original positions, the online softmax in registers, O += P V by wgmma m64n128k16 (P
// from registers); three shared-memory stages between them (mbarriers), two CTAs per SM
// (setmaxnreg: 56 registers for the producer, 200 for the consumer). The producer's copies run
// along the rows (a warp reads 2 whole rows per instruction: every 32-byte L2 sector once). It is
// the default on sm_90; the mma.sync kernel runs everywhere else and is the reference the tests
// compare it with.
#pragma once

#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda {

// Which kernel paged_block_sparse_attention runs. kAuto: the environment's VLM_CUDA_SPARSE_KERNEL
// (read once: "mma" or "wgmma"), else kWgmma. kWgmma where the sm_90a kernel is not supported
// (another GPU, D 64, an f32 cache) runs kMma. Measured on the H100 (bench/RESULTS.md, "End to
// end V" and "End to end VI"): on the same 128K plans kWgmma 12.8 ms, kMma 19.3 ms, the same output
// bit for bit; over a 128K prompt's 16 chunks 0.54 s against 0.74 s. Three slower sm_90a forms
// (Q in shared memory, two stages, S of the next tile overlapping P V; 26.4-28.0 ms, each thread
// copying half a row) were measured and removed.
enum class BlockSparseKernel { kAuto, kMma, kWgmma };
// Test and bench knob (A/B of the kernels on the same plans). Not thread-safe; set before launching.
void set_block_sparse_kernel(BlockSparseKernel k);
// The kernel the next launch over this cache runs (never kAuto).
BlockSparseKernel block_sparse_kernel_for(const PagedKVLayer& kv);

// The sm_90a kernel's launch (block_sparse_kernel_for(kv) is kWgmma; checks done by the caller).
void launch_block_sparse_sm90(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                              const CudaAttentionBatch& batch, const SparsePlanView& plan, float scale,
                              void* out /*[T,H,D]*/, cudaStream_t stream);

}  // namespace vlm::cuda
