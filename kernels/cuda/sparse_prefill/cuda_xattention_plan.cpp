#include "kernels/cuda/sparse_prefill/cuda_xattention_plan.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"

namespace vlm::cuda {

void CudaXAttentionPlan::begin(int H, int t0, int q_len, int N, cudaStream_t stream) {
  VLM_CHECK(H > 0 && H <= kXAttnMaxHeads && q_len > 0 && N >= q_len, "xattention plan: {} heads q_len {} keys {}", H,
            q_len, N);
  shape_ = XAttnShape{};
  shape_.num_heads = H, shape_.t0 = t0, shape_.q_len = q_len, shape_.num_keys = N;
  const int n = H * shape_.num_qblocks();
  const size_t n1 = size_t(n) + 1;
  scratch_.reserve(grid_plan_schedule_words(n) * sizeof(int32_t));
  keep_.reserve(size_t(n) * shape_.words() * sizeof(uint32_t));
  // Block counts of heads not estimated stay zero; the column counts are all zero.
  VLM_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, 2 * n1 * sizeof(int32_t), stream));
}

void CudaXAttentionPlan::estimate(const void* q, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                                  std::span<const int> heads, const XAttentionParams& p, int dense_from, float scale,
                                  cudaStream_t stream) {
  XAttnShape sh = shape_;
  sh.stride = p.stride;
  const int nqb = sh.num_qblocks(), nkb = sh.num_kblocks();
  const size_t per_head = size_t(nqb) * nkb * sizeof(float);
  const int group = static_cast<int>(std::clamp<size_t>(score_bytes / per_head, 1, kXAttnMaxHeads));
  scores_.reserve(std::min<size_t>(group, heads.size()) * per_head);
  int32_t* nblocks = scratch_.as<int32_t>();
  for (size_t i0 = 0; i0 < heads.size(); i0 += group) {
    XAttnHeads hs;
    hs.n = static_cast<int>(std::min<size_t>(group, heads.size() - i0));
    for (int i = 0; i < hs.n; ++i) {
      hs.h[i] = heads[i0 + i];
      VLM_CHECK(hs.h[i] >= 0 && hs.h[i] < sh.num_heads, "xattention head {} of {}", hs.h[i], sh.num_heads);
    }
    xattn_block_scores(q, act, kv, block_table, sh, hs, scale, scores_.as<float>(), stream);
    xattn_select(scores_.as<float>(), sh, hs, p.threshold, dense_from, keep_.as<uint32_t>(), nblocks, stream);
  }
}

void CudaXAttentionPlan::build(cudaStream_t stream) {
  const int H = shape_.num_heads, nqb = shape_.num_qblocks(), n = H * nqb, q_len = shape_.q_len,
            N = shape_.num_keys;
  const size_t n1 = size_t(n) + 1;
  GridPlanSchedule sc = grid_plan_schedule_over(scratch_.as<int32_t>(), n);
  temp_.reserve(sc.temp_bytes);
  sc.temp = temp_.get();
  grid_plan_schedule(sc, stream);
  VLM_CUDA_CHECK(cudaMemcpyAsync(&total_, sc.block_off + n, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));

  // The plan buffer: items [n, 4], descs [H], block pointers [n + 1], zero column pointers
  // [n + 1], blocks [total].
  const int64_t item_words = 4 * int64_t(n), desc_words = int64_t(H) * (sizeof(SparseHeadDesc) / 4);
  const int64_t ptr_base = item_words + desc_words, zero_base = ptr_base + int64_t(n1),
                blocks_base = zero_base + int64_t(n1), words = blocks_base + total_;
  VLM_CHECK(words < (int64_t(1) << 31), "xattention plan of {} words too large", words);
  plan_.reserve(size_t(words) * sizeof(int32_t));
  int32_t* const d = plan_.as<int32_t>();
  VLM_CUDA_CHECK(
      cudaMemcpyAsync(d + ptr_base, sc.block_off, n1 * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(d + zero_base, 0, n1 * sizeof(int32_t), stream));
  xattn_fill(keep_.as<uint32_t>(), sc.block_off, n, shape_.words(), d + blocks_base, stream);
  grid_plan_items(sc.idx_out, n, nqb, d, stream);
  // The split of long items: the policy CudaBlockSparsePlan::upload takes for these totals (known
  // here), so the schedule is the uploaded plans' (one CTA per piece, no queue).
  const SplitPolicy policy = block_sparse_split_policy(total_, 0, n);
  const SplitBounds bounds = block_sparse_split_bounds(policy, total_, 0, n);
  view_.piece_off = view_.slot_off = nullptr;
  view_.partial = nullptr;
  view_.queue = nullptr;
  view_.max_pieces = n;
  if (policy.piece > 0) grid_plan_fixed_split(sc, policy, bounds, split_, partial_, view_, "xattention", stream);
  std::vector<SparseHeadDesc> descs(H);
  for (int h = 0; h < H; ++h) {
    SparseHeadDesc& x = descs[h];
    x.q_order = x.k_order = -1;
    x.block_ptr = ptr_base + int64_t(h) * nqb;
    x.col_ptr = zero_base + int64_t(h) * nqb;
    x.blocks = x.cols = blocks_base;
    x.t0 = shape_.t0;
    x.q_len = q_len;
    x.num_keys = N;
    x.flags = kHeadAlignedBlocks;  // XAttention lists aligned blocks
  }
  VLM_CUDA_CHECK(
      cudaMemcpyAsync(d + item_words, descs.data(), H * sizeof(SparseHeadDesc), cudaMemcpyHostToDevice, stream));
  view_.data = d;
  view_.items = d;
  view_.descs = reinterpret_cast<const SparseHeadDesc*>(d + item_words);
  view_.num_items = n;
  counts_ = {};
  counts_.computed = total_;
  counts_.causal = H * causal_key_blocks(q_len, N, 64, 64);
  // descs is pageable: the copy has left it when cudaMemcpyAsync returns.
}

std::vector<HeadPlan> CudaXAttentionPlan::host_plans(std::span<const int> heads, cudaStream_t stream) {
  const int nqb = shape_.num_qblocks(), words = shape_.words();
  std::vector<uint32_t> bits(size_t(nqb) * words * heads.size());
  for (size_t i = 0; i < heads.size(); ++i)
    VLM_CUDA_CHECK(cudaMemcpyAsync(bits.data() + i * nqb * words, keep_.as<uint32_t>() + size_t(heads[i]) * nqb * words,
                                   size_t(nqb) * words * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<HeadPlan> plans(heads.size());
  for (size_t i = 0; i < heads.size(); ++i) {
    HeadPlan hp = empty_head_plan(nqb);
    for (int I = 0; I < nqb; ++I) {
      const uint32_t* w = bits.data() + (i * nqb + I) * words;
      for (int x = 0; x < words; ++x)
        for (uint32_t b = w[x]; b; b &= b - 1) hp.blocks.push_back((x * 32 + __builtin_ctz(b)) * kXAttnBlock);
      hp.block_ptr[I + 1] = static_cast<int32_t>(hp.blocks.size());
    }
    plans[i] = std::move(hp);
  }
  return plans;
}

}  // namespace vlm::cuda
