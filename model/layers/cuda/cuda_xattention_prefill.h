// XAttention heads in CudaSparsePrefill (cuda_sparse_prefill.h): their estimation runs on the GPU
// (CudaXAttentionPlan). A step of one sparse sequence whose heads are all XAttention heads with
// one parameter set (method xattention; an MMInference file of xattention heads) gets its plan
// built on the device (device_planned: no host plan, no upload); otherwise (MMInference heads of
// mixed types, batches of several sparse sequences) host_plans() brings the XAttention heads'
// plans to the host in one download per sequence and layer, beside the other heads' plans.
// The dense prompt tail (XAttentionParams::n_last) is measured from ForwardBatch::prompt_lens.
#pragma once

#include <functional>
#include <vector>

#include "kernels/cuda/sparse_prefill/cuda_xattention_plan.h"
#include "model/layers/cuda/cuda_sparse_counts.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class CudaXAttentionPrefill {
 public:
  // pats[H]: the step's sequence 0 head patterns. True when they are all XAttention heads of one
  // parameter set and b has that one sparse sequence: estimation, plan and attention done, with
  // no host synchronization (the block counts go to b.sparse_block_counts[0] through counts, at
  // the step's end). False: nothing done.
  bool device_planned(const ForwardBatch& b, const std::vector<HeadPattern>& pats, const void* q /*[T,H,D]*/,
                      DType act, const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale,
                      void* out /*[T,H,D]*/, cudaStream_t stream, CudaSparseCounts& counts);
  // The plans of sequence s's XAttention heads ([H]; other heads' entries empty).
  std::vector<HeadPlan> host_plans(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats,
                                   const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv,
                                   const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream);

  // The plan device_planned() built last.
  cuda::SparsePlanView view() const { return plan_.view(); }

  std::function<void(const char*)> marker;  // profiler marks ("xattn_estimate"), or empty

 private:
  // Estimates sequence s's XAttention heads (one call per distinct parameter set).
  void estimate(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats, const void* q, DType act,
                const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream);
  cuda::CudaXAttentionPlan plan_;
};

}  // namespace vlm
