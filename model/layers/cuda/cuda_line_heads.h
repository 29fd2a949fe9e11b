// The vertical-slash and inter-modality (Q-boundary, 2D-boundary) heads of CudaSparsePrefill:
// their lines estimated on the GPU for every head of a sequence's chunk at once
// (CudaVerticalSlash, CudaBoundaryLines), then either
//  - plan(): one download per layer and sequence of every such head's lines, the host's
//    vertical_slash_head_plan / boundary_head_plan on the thread pool (the caller uploads the
//    batch's plans with the others), or
//  - device_planned(): a step of one sparse sequence whose heads are all vertical-slash heads
//    (method vertical_slash, or MMInference heads of that type whose boundary does not apply):
//    the plans built on the device from the device lists (CudaVerticalSlashPlan), no list
//    download and no plan upload.
// A boundary head applies when the sequence's keys hold more than one modality (its
// ForwardBatch::prompt_modalities); else its intra-modality type plans it, as on the CPU.
#pragma once

#include <vector>

#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "kernels/cuda/sparse_estimate/cuda_boundary_lines.h"
#include "kernels/cuda/sparse_estimate/cuda_vertical_slash.h"
#include "kernels/cuda/sparse_prefill/cuda_vertical_slash_plan.h"
#include "model/layers/cuda/cuda_sparse_counts.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class CudaLineHeads {
 public:
  // Sequence s's key modality codes (text past the prompt's tags) into codes_; whether they mix.
  bool load_codes(const ForwardBatch& b, int s);
  // Whether head pattern pt is planned here (after load_codes for its sequence).
  bool line_head(const HeadPattern& pt) const {
    return (pt.boundary != BoundaryKind::None && mixed_) || pt.type == HeadPatternType::VerticalSlash;
  }

  // heads[h] = the plan of every line head h of sequence s (pats[H]; others untouched; planned[h]
  // set for those). q[T, H, D] device; one stream sync.
  void plan(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats, const void* q, DType act,
            const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream,
            std::vector<HeadPlan>& heads, std::vector<uint8_t>& planned);

  // The device-planned case above (b: one sparse sequence; pats[H] all line heads of type
  // vertical-slash without an applying boundary): estimate, device plan, attention into out, no
  // host sync; the block counts go to counts (the step's device accumulator). False (nothing
  // done) when the case does not hold.
  bool device_planned(const ForwardBatch& b, const std::vector<HeadPattern>& pats, const void* q, DType act,
                      const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, void* out,
                      cudaStream_t stream, CudaSparseCounts& counts);
  // The plan view the last device_planned() ran.
  cuda::SparsePlanView device_plan_view() const { return vs_plan_.view(); }

 private:
  cuda::GridEstimateShape shape(const ForwardBatch& b, int s, int H) const;
  void estimate_vertical_slash(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats, const void* q,
                               DType act, const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale,
                               cudaStream_t stream);

  std::vector<uint8_t> codes_;
  bool mixed_ = false;
  cuda::CudaVerticalSlash vs_;
  cuda::CudaVerticalSlashPlan vs_plan_;
  cuda::CudaBoundaryLines boundary_;
};

}  // namespace vlm
