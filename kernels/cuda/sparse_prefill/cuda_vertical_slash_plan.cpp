#include "kernels/cuda/sparse_prefill/cuda_vertical_slash_plan.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"
#include "kernels/cuda/sparse_prefill/vertical_slash_plan.cuh"

namespace vlm::cuda {

void CudaVerticalSlashPlan::build(const CudaVerticalSlash& est, int t0, int q_len, int N, cudaStream_t stream,
                                  unsigned long long* count_acc) {
  const int H = est.num_heads();
  VLM_CHECK(H > 0 && q_len > 0 && N >= q_len, "vertical-slash plan: {} heads q_len {} keys {}", H, q_len, N);
  VerticalSlashPlanShape sh{H, q_len, N};
  VerticalSlashLists L;
  L.lists = est.lists();
  L.vbegin = est.device_offsets();
  L.sbegin = L.vbegin + H;
  L.vcount = est.device_counts();
  L.scount = L.vcount + H;
  const int nqb = sh.num_qblocks(), nkb = (N + 63) / 64, n = H * nqb;
  // Scratch: counts (2 x (n + 1)), offsets (2 x (n + 1)), sort keys and values (4 x n), the
  // heads' unaligned flags (H).
  scratch_.reserve((grid_plan_schedule_words(n) + H) * sizeof(int32_t));
  int32_t* nblocks = scratch_.as<int32_t>();
  GridPlanSchedule sc = grid_plan_schedule_over(nblocks, n);
  int32_t* unaligned = sc.idx_out + n;
  VLM_CUDA_CHECK(cudaMemsetAsync(unaligned, 0, H * sizeof(int32_t), stream));
  vertical_slash_plan_count(L, sh, nblocks, nblocks + n + 1, unaligned, stream);
  totals_[0] = sc.block_off + n;
  totals_[1] = sc.col_off + n;

  // The plan buffer: items [n, 4], descs [H], pointers, blocks, cols (no orders: identity); the
  // lists at their bounds (a query block lists at most nkb + 1 key blocks -- its ranges are
  // disjoint, whole blocks long -- and each of its head's verticals at most once).
  int max_v = 0;
  for (int h = 0; h < H; ++h) max_v = std::max(max_v, est.count(h));
  const int64_t blocks_bound = static_cast<int64_t>(n) * (nkb + 1), cols_bound = static_cast<int64_t>(n) * max_v;
  const int64_t item_words = 4 * static_cast<int64_t>(n);
  const int64_t desc_words = static_cast<int64_t>(H) * (sizeof(SparseHeadDesc) / 4);
  VerticalSlashPlanOut out{};
  out.ptr_base = item_words + desc_words;
  out.blocks_base = out.ptr_base + static_cast<int64_t>(H) * 2 * (nqb + 1);
  out.cols_base = out.blocks_base + blocks_bound;
  const int64_t words = out.cols_base + cols_bound;
  VLM_CHECK(words < (int64_t(1) << 31), "vertical-slash plan of {} words too large", words);
  plan_.reserve(static_cast<size_t>(words) * sizeof(int32_t));
  int32_t* const d = plan_.as<int32_t>();
  out.data = d;
  out.block_off = sc.block_off;
  out.col_off = sc.col_off;
  // The schedule as CudaGridPlan's (one CTA; the CUB sort first for more items than it sorts).
  GridPlanScheduleArgs args;
  args.shape.num_heads = H;
  args.shape.q_len = q_len;
  args.shape.num_keys = N;
  args.out.data = d;
  args.out.order_base = -1;
  args.out.ptr_base = out.ptr_base;
  args.out.blocks_base = out.blocks_base;
  args.out.cols_base = out.cols_base;
  args.descs = reinterpret_cast<SparseHeadDesc*>(d + item_words);
  args.unaligned = unaligned;
  grid_plan_run_schedule(sc, args, t0, blocks_bound + n * ((max_v + 63) / 64) + n, count_acc, temp_, split_, partial_,
                         view_, stream);
  vertical_slash_plan_fill(L, sh, out, stream);
  stream_ = stream;
  causal_ = H * causal_key_blocks(q_len, N, 64, 64);
}

BlockCounts CudaVerticalSlashPlan::block_counts() const { return download_block_counts(totals_, causal_, stream_); }

}  // namespace vlm::cuda
