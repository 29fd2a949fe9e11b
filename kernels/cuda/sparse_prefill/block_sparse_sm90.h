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
// from registers); shared-memory stages between them (mbarriers), two CTAs per SM (setmaxnreg:
// 56 registers for the producer, 200 for the consumer). The mma.sync kernel is the default (on
// other GPUs and shapes the only one) and the reference the tests compare the sm_90a kernel with;
// the sm_90a kernel's coalesced form is faster as measured (below) and becomes the default on
// sm_90 once it has passed the GPU tests and the end-to-end run.
#pragma once

#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda {

// Which kernel paged_block_sparse_attention runs. kAuto: the environment's VLM_CUDA_SPARSE_KERNEL
// (read once: "mma", "wgmma", "wgmma2", "overlap" or "coalesced"), else kMma. Measured on the
// H100 on the same 128K plans (bench_cuda_sparse_prefill; bench/RESULTS.md, "End to end V"):
// kWgmmaCoalesced 12.8 ms, mma.sync 19.3 ms, the other sm_90a forms 26.4-28.0 ms, all with the
// same output bit for bit (the other forms also in the tests; the coalesced form's tests were
// added after the last GPU call and have not run yet). The sm_90a forms: kWgmma three K/V stages, Q as wgmma A fragments in
// the consumer's registers, the producer's copies 16-byte pieces of 16 rows per warp instruction;
// kWgmma2 two stages, Q an SW128 tile in shared memory (the first form); kWgmmaOverlap as kWgmma
// with S of the next tile issued before P V of the current one (the softmax of one tile under the
// other's products); kWgmmaCoalesced as kWgmma with the copies along the rows (a warp reads 2
// whole rows per instruction: every 32-byte L2 sector once). A wgmma choice where the sm_90a
// kernel is not supported (another GPU, D 64, an f32 cache) runs kMma.
enum class BlockSparseKernel { kAuto, kMma, kWgmma, kWgmma2, kWgmmaOverlap, kWgmmaCoalesced };
// Test and bench knob (A/B of the kernels on the same plans). Not thread-safe; set before launching.
void set_block_sparse_kernel(BlockSparseKernel k);
// The kernel the next launch over this cache runs (never kAuto).
BlockSparseKernel block_sparse_kernel_for(const PagedKVLayer& kv);

// The sm_90a kernel's launch in form `form` (one of the wgmma forms; block_sparse_kernel_for(kv)
// is not kMma; checks done by the caller).
void launch_block_sparse_sm90(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                              const CudaAttentionBatch& batch, const SparsePlanView& plan, float scale,
                              void* out /*[T,H,D]*/, BlockSparseKernel form, cudaStream_t stream);

}  // namespace vlm::cuda
