#include "kernels/cuda/sparse_prefill/cuda_vertical_slash_plan.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"
#include "kernels/cuda/sparse_prefill/vertical_slash_plan.cuh"

namespace vlm::cuda {

void CudaVerticalSlashPlan::build(const CudaVerticalSlash& est, int t0, int q_len, int N, cudaStream_t stream) {
  const int H = est.num_heads();
  VLM_CHECK(H > 0 && q_len > 0 && N >= q_len, "vertical-slash plan: {} heads q_len {} keys {}", H, q_len, N);
  VerticalSlashPlanShape sh{H, q_len, N};
  VerticalSlashLists L;
  L.lists = est.lists();
  L.vbegin = est.device_offsets();
  L.sbegin = L.vbegin + H;
  L.vcount = est.device_counts();
  L.scount = L.vcount + H;
  const int nqb = sh.num_qblocks(), n = H * nqb;
  const size_t n1 = static_cast<size_t>(n) + 1;
  // Scratch: counts (2 x (n + 1)), offsets (2 x (n + 1)), sort keys and values (4 x n), the
  // heads' unaligned flags (H).
  scratch_.reserve((grid_plan_schedule_words(n) + H) * sizeof(int32_t));
  int32_t* nblocks = scratch_.as<int32_t>();
  int32_t* ncols = nblocks + n1;
  GridPlanSchedule sc = grid_plan_schedule_over(nblocks, n);
  temp_.reserve(sc.temp_bytes);
  sc.temp = temp_.get();
  VLM_CUDA_CHECK(cudaMemsetAsync(nblocks + n, 0, sizeof(int32_t), stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(ncols + n, 0, sizeof(int32_t), stream));
  int32_t* unaligned = sc.idx_out + n;
  VLM_CUDA_CHECK(cudaMemsetAsync(unaligned, 0, H * sizeof(int32_t), stream));
  vertical_slash_plan_count(L, sh, nblocks, ncols, unaligned, stream);
  grid_plan_schedule(sc, stream);
  // One download: the two list totals and the heads' unaligned flags.
  totals_.reserve((2 + H) * sizeof(int32_t));
  int32_t* totals = totals_.as<int32_t>();
  VLM_CUDA_CHECK(cudaMemcpyAsync(totals, sc.block_off + n, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaMemcpyAsync(totals + 1, sc.col_off + n, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaMemcpyAsync(totals + 2, unaligned, H * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int64_t nb = totals[0], nc = totals[1];

  // The plan buffer: items [n, 4], descs [H], pointers, blocks, cols (no orders: identity).
  const int64_t item_words = 4 * static_cast<int64_t>(n);
  const int64_t desc_words = static_cast<int64_t>(H) * (sizeof(SparseHeadDesc) / 4);
  VerticalSlashPlanOut out{};
  out.ptr_base = item_words + desc_words;
  out.blocks_base = out.ptr_base + static_cast<int64_t>(H) * 2 * (nqb + 1);
  out.cols_base = out.blocks_base + nb;
  const int64_t words = out.cols_base + nc;
  VLM_CHECK(words < (int64_t(1) << 31), "vertical-slash plan of {} words too large", words);
  plan_.reserve(static_cast<size_t>(words) * sizeof(int32_t));
  int32_t* const d = plan_.as<int32_t>();
  out.data = d;
  out.block_off = sc.block_off;
  out.col_off = sc.col_off;
  vertical_slash_plan_fill(L, sh, out, stream);
  grid_plan_items(sc.idx_out, n, nqb, d, stream);
  // The split as CudaBlockSparsePlan::upload makes it (the host's policy from the totals).
  const SplitPolicy policy = block_sparse_split_policy(nb, nc, n);
  const SplitBounds bounds = block_sparse_split_bounds(policy, nb, nc, n);
  view_ = SparsePlanView{};
  view_.max_pieces = n;
  if (policy.piece > 0) grid_plan_fixed_split(sc, policy, bounds, split_, partial_, view_, "vertical-slash", stream);
  std::vector<SparseHeadDesc> descs(H);
  for (int h = 0; h < H; ++h) {
    SparseHeadDesc& x = descs[h];
    x.q_order = x.k_order = -1;
    x.block_ptr = out.ptr_base + static_cast<int64_t>(h) * 2 * (nqb + 1);
    x.col_ptr = x.block_ptr + nqb + 1;
    x.blocks = out.blocks_base;
    x.cols = out.cols_base;
    x.t0 = t0, x.q_len = q_len, x.num_keys = N;
    x.flags = totals[2 + h] ? 0 : kHeadAlignedBlocks;
  }
  // A pageable source: copied when the call returns.
  VLM_CUDA_CHECK(cudaMemcpyAsync(d + item_words, descs.data(), H * sizeof(SparseHeadDesc), cudaMemcpyHostToDevice,
                                 stream));
  view_.data = d;
  view_.items = d;
  view_.descs = reinterpret_cast<const SparseHeadDesc*>(d + item_words);
  view_.num_items = n;
  counts_ = {};
  counts_.computed = nb + nc / 64.0;
  for (int m = 0; m < nqb; ++m) counts_.causal += (N - q_len + std::min(q_len, (m + 1) * 64) - 1) / 64 + 1;
  counts_.causal *= H;
}

}  // namespace vlm::cuda
