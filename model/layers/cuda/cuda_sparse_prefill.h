// Sparse prefill in CudaDecoder (the GPU's counterpart of model/methods/sparse_prefill_attention):
// per layer, the BlockSparsePlan of every sequence whose ForwardBatch::sparse_prefill entry is
// enabled (q_len > 1), an all-blocks plan for the other sequences (decode rows, dense prompts),
// one upload and one paged_block_sparse_attention call over the whole batch. Plans are made on
// the host from the configuration (A-shape, tri-shape, dense heads) and from the grid layouts
// the device searches (CudaGridSearch) -- except for a step of one sparse sequence whose heads
// are all grid heads (MMInference's default, method grid: the long-prompt case), whose plans are
// built on the device (CudaGridPlan, no host plan and no upload). Vertical-slash and boundary
// heads estimate on the device (CudaLineHeads: device plans for a step of one sequence of
// vertical-slash heads, else host plans from one download of the lines per layer and sequence);
// XAttention heads too (CudaXAttentionPrefill: a plan built there for a step of one sequence of
// XAttention heads, else their plans downloaded once per sequence and layer); configurations
// that need the chunk's data on the host
// (plannable_without_host_data false) are refused with a RequestError. Rows of sequences without
// sparse prefill go through the all-blocks plan: equal to the dense kernel up to rounding (the
// same tiles in the same order; the CUDA block-sparse test measures it), not bit-identical.
// With SparsePrefillConfig::grid_search_once and a sequence's ForwardBatch::grid_layouts store,
// the grid search runs on the sequence's first sparse chunk only (per layer); later chunks plan
// from the stored layouts: no search and no download of line sums.
// Plan ahead (set_sparse_plan_ahead, default on): on the device-planned grid path, when the next
// layer's layouts are in the store (a later chunk), its plan is built on a second stream while
// this layer's block-sparse kernel runs (two plan buffers by layer parity; the next layer's
// attention waits for it): the plan's small launches fill the kernel's ramp and tail and the
// combine instead of running alone between the layers. The plans are the same. Cost: a second
// plan buffer (CudaGridPlan's bounds: ~46 MB for 8K rows over 128K keys, ~180 MB over 512K).
// Tensor parallelism (issue 42, set_heads): a rank's q / out hold the model's query heads
// [head_begin, head_begin + H); each is planned with the model head's pattern (rank_head_patterns)
// and the sequence's GridLayoutStore keeps the model's heads: a rank reads its slice, and the
// layouts it searched wait in the rank until commit_layouts() (CudaBackend, after every rank's
// step returned) puts them, so no rank sees a layer another rank stored only in part. Block
// counts from every rank add to the sequence's BlockCounts under one lock (CudaSparseCounts::add).
#pragma once

#include <vector>

#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"
#include "kernels/cuda/sparse_estimate/cuda_grid_search.h"
#include "model/layers/cuda/cuda_line_heads.h"
#include "model/layers/cuda/cuda_xattention_prefill.h"
#include "model/layers/cuda/cuda_sparse_counts.h"
#include "model/layers/cuda/step_profiler.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

// Test and bench knob: whether CudaSparsePrefill builds the next layer's grid plan ahead (above).
// Read at each attention call; not thread-safe. VLM_CUDA_SPARSE_PLAN_AHEAD=0 in the environment
// turns the default off.
void set_sparse_plan_ahead(bool on);

class CudaSparsePrefill {
 public:
  CudaSparsePrefill() = default;
  CudaSparsePrefill(const CudaSparsePrefill&) = delete;
  CudaSparsePrefill& operator=(const CudaSparsePrefill&) = delete;
  ~CudaSparsePrefill();

  // Whether some sequence of b prefills sparsely this step (enabled, q_len > 1).
  static bool active(const ForwardBatch& b);

  // Tensor parallelism: this decoder's query heads are the model's [head_begin, head_begin + H)
  // of total_heads (0: one GPU, all heads). Set once, before the first step.
  void set_heads(int head_begin, int total_heads) {
    head_begin_ = head_begin;
    total_heads_ = total_heads;
  }
  // Tensor parallelism: drops layouts left pending by a step that did not finish (step start).
  void begin_step() { pending_layouts_.clear(); }
  // Tensor parallelism: puts the grid layouts this rank searched in the last step into their
  // sequences' stores (as the model's heads). Call on one thread after every rank's forward
  // returned (the stores are the batch's; the ranks read them during a step). One GPU: a no-op
  // (the layouts are stored as they are searched).
  void commit_layouts();

  // q[T, H, D], out[T, H, D] (device, dtype act); meta: b's device metadata. The step's K/V are
  // in the cache. Adds each sparse sequence's block counts to b.sparse_block_counts[s]. prof
  // (optional) gets marks "grid_scores", "grid_choose_host" (the search), "sparse_plan" and
  // "sparse_kernel".
  void attention(int layer, const ForwardBatch& b, const void* q /*[T,H,D]*/, DType act, int num_heads,
                 const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, void* out /*[T,H,D]*/,
                 cudaStream_t stream, StepProfiler* prof = nullptr);
  // After a step's last layer: device-planned steps' block counts reach b.sparse_block_counts
  // when the stream gets there (CudaSparseCounts).
  void finish_step(cudaStream_t stream) {
    counts_.finish(stream);
    ahead_ = Ahead{};  // a step's last layer builds nothing ahead; an aborted step's plan is dropped
  }
  // Whether device-planned steps' block counts are still on their way to their targets.
  bool counts_in_flight() const { return counts_.in_flight(); }
  // The plan view the last attention() ran (tools: per-head block counts, head_error.h).
  const cuda::SparsePlanView& last_plan() const { return last_plan_; }

 private:
  static void check_config(const SparsePrefillConfig& cfg);  // RequestError when the GPU cannot plan it
  // The patterns of this decoder's H heads (the model's heads from head_begin_).
  std::vector<HeadPattern> head_patterns(int layer, const SparsePrefillConfig& cfg, int H) const;
  int total_heads(int H) const { return total_heads_ > 0 ? total_heads_ : H; }
  // The device-searched layouts of sequence s's grid heads (others left default), or those its
  // store kept from an earlier chunk (grid_search_once).
  std::vector<GridLayout> grid_layouts(int layer, const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats,
                                       const void* q, DType act, const PagedKVLayer& kv,
                                       const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream);
  // One sparse sequence whose heads are all grid heads of one parameter set (MMInference's default,
  // method grid): search and plans on the device (CudaGridPlan), then the attention. False (nothing
  // done) otherwise.
  bool device_planned(int layer, const ForwardBatch& b, const void* q, DType act, int H, const PagedKVLayer& kv,
                      const cuda::CudaAttentionBatch& meta, float scale, void* out, cudaStream_t stream);
  // Whether pats is one grid parameter set the device plan takes (every head a grid head, no boundary).
  static bool device_grid_heads(const std::vector<HeadPattern>& pats);
  static bool plan_ahead_wanted();  // set_sparse_plan_ahead / the environment
  // After layer `layer`'s device-planned grid attention was enqueued (its kernel after the event
  // go_): builds layer + 1's plan on side_ into device_plans_[(layer + 1) & 1] when its layouts are
  // stored and it will take the same path (ahead_ records it). acc: the step's count accumulator.
  void plan_ahead(int layer, const ForwardBatch& b, int H, unsigned long long* acc);
  BlockSparsePlan plan_sequence(int layer, const ForwardBatch& b, int s, const void* q, DType act, int H,
                                const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale,
                                cudaStream_t stream);

  cuda::CudaGridSearch grid_;
  int head_begin_ = 0, total_heads_ = 0;  // set_heads
  struct PendingLayouts {  // tensor parallelism: searched this step, stored at commit_layouts()
    GridLayoutStore* store;
    int layer;
    std::vector<GridLayout> layouts;  // [H] this rank's heads
  };
  std::vector<PendingLayouts> pending_layouts_;
  cuda::CudaBlockSparsePlan plan_;
  cuda::CudaGridPlan device_plans_[2];  // by layer parity (plan ahead)
  struct Ahead {
    int layer = -1, t0 = 0, q_len = 0, num_keys = 0;
  };
  Ahead ahead_;  // the plan built ahead (layer -1: none)
  cudaStream_t side_ = nullptr;
  cudaEvent_t go_ = nullptr, ready_[2] = {nullptr, nullptr};
  bool pending_[2] = {false, false};  // device_plans_[i] is being built on side_ (ready_[i] after it)
  CudaLineHeads lines_;  // vertical-slash and boundary heads (cuda_line_heads.h)
  CudaXAttentionPrefill xattn_;  // XAttention heads (estimated on the device)
  CudaSparseCounts counts_;
  cuda::SparsePlanView last_plan_;
  StepProfiler* prof_ = nullptr;  // this call's (attention's argument)
  cudaStream_t stream_ = nullptr;
  void mark(const char* name) {
    if (prof_) prof_->mark(stream_, name);
  }
};

}  // namespace vlm
