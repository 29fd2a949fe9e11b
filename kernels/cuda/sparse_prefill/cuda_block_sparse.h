// Block-sparse prefill attention on the GPU (tensor cores) over the paged KV cache: the CUDA
// mechanism behind sparse prefill, running the BlockSparsePlan the CPU planners make
// (kernels/attention/block_sparse_plan.h: per-head key blocks, permuted query rows and keys,
// gathered key columns, causality by original positions).
//
// CudaBlockSparsePlan flattens the plans of a batch into one device buffer (one upload): per
// (sequence, head) a HeadDesc with offsets into the int32 arrays, and the work items
// (sequence, head, query block) sorted longest first, with the pieces of the long ones
// (SplitPolicy, sparse_plan_view.h) when some item is split.
//
// paged_block_sparse_attention: one CTA (4 warps, 16 query rows each) per work item, or per
// piece of an item split along its key tiles (a combine kernel then merges the pieces' partial
// O, row max and row sum by log-sum-exp) -- or, for plans with a queue (CudaGridPlan), a
// resident grid whose CTAs take the pieces in cost order from an atomic counter; the 64 rows of
// the query block (taken through q_order) stay as mma A fragments in registers; each key tile is
// 64 key positions (a listed key block through k_order, or 64 of the gathered columns) whose K/V
// rows are copied from the paged cache with cp.async (two stages; each row's cache offset looked
// up once per tile by one thread and shared through shared memory, its plan-order position
// loaded one tile ahead), then S = QK^T (mma.sync
// m16n8k16), the causal mask by original positions (key position > row position: -inf), online
// softmax and O += PV, as in prefill_attention.cu (mma_tile.cuh primitives). A row that attends
// no key gets a zero output. Contract of cuda_attention.h (device pointers, stream-ordered,
// no allocation in the attention call), plus:
//  - kv.dtype BF16 or F16 (the tensor-core path; an F32 cache is refused), or F8_E4M3 with its
//    k/v scales (--kv-cache-dtype fp8: the mma.sync kernel copies each tile's E4M3 rows as bytes
//    and converts them to bf16 in shared memory, exactly, as prefill_attention.cu; K's per-head
//    scale multiplies the softmax scale, V's the output rows; never the sm_90a kernel), D in {64, 128},
//    H % Hkv == 0, kv.block_size a power of two; plan block_m == block_n == 64.
//  - Rows of sequences without a plan are not written.
// Its naive reference is the CPU's block_sparse_attention_ref (the mask materialised per head,
// two-pass softmax in double), which the tests compare it with.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"
#include "kernels/cuda/core/device_buffer.h"

namespace vlm::cuda {

class CudaBlockSparsePlan {
 public:
  // Flattens plans[num_seqs] (nullptr: sequence skipped) into pinned staging memory and uploads
  // them on `stream` (asynchronously; the next upload waits for this one's copy). cu_seqlens_q_host[num_seqs + 1]:
  // the batch's query rows (host). Each plan must be well formed (validate_plan; trusted here),
  // with heads.size() == num_heads and block_m == block_n == 64.
  void upload(std::span<const BlockSparsePlan* const> plans, const int32_t* cu_seqlens_q_host, int num_heads,
              cudaStream_t stream);

  SparsePlanView view() const { return view_; }
  int num_heads() const { return num_heads_; }
  // Computed key blocks / causal key blocks of the uploaded plans (plan_block_counts summed).
  double block_density() const { return counts_.causal > 0 ? counts_.computed / counts_.causal : 1.0; }

 private:
  PinnedBuffer host_;  // int32 words: items, then descs, then the arrays
  DeviceBuffer dev_;
  DeviceBuffer partial_;  // the split pieces' workspace
  bool pending_ = false;  // an upload from host_ may still be in flight on pending_stream_
  cudaStream_t pending_stream_ = nullptr;
  SparsePlanView view_;
  int num_heads_ = 0;
  BlockCounts counts_;
};

// q[T, H, D], out[T, H, D] in dtype act. batch as for paged_prefill_attention (device pointers);
// plan uploaded for this batch and H.
void paged_block_sparse_attention(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                                  const CudaAttentionBatch& batch, const CudaBlockSparsePlan& plan, float scale,
                                  void* out /*[T,H,D]*/, cudaStream_t stream);
// The same over a plan view built elsewhere (CudaGridPlan: plans made on the device) for
// num_heads heads.
void paged_block_sparse_attention(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                                  const CudaAttentionBatch& batch, const SparsePlanView& plan, float scale,
                                  void* out /*[T,H,D]*/, cudaStream_t stream);

}  // namespace vlm::cuda
