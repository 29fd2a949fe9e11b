#include "kernels/cuda/sparse_prefill/cuda_xattention_plan.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"
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

void CudaXAttentionPlan::build(cudaStream_t stream, unsigned long long* count_acc) {
  const int H = shape_.num_heads, nqb = shape_.num_qblocks(), n = H * nqb, q_len = shape_.q_len,
            N = shape_.num_keys;
  GridPlanSchedule sc = grid_plan_schedule_over(scratch_.as<int32_t>(), n);  // the counts: estimate's
  totals_[0] = sc.block_off + n;
  totals_[1] = sc.col_off + n;
  causal_ = H * causal_key_blocks(q_len, N, kXAttnBlock, kXAttnBlock);

  // The plan buffer: items [n, 4], descs [H], pointers [H, 2, nqb + 1], blocks at their bound (a
  // query block keeps at most its causal key blocks: H x causal_key_blocks in all; 128K one-shot
  // at 28 heads: 58.7M words, 235 MB; 512K one-shot: 940M words, 3.8 GB; a chunk of 8K rows
  // against 512K keys: 29.1M words, 117 MB).
  const int64_t blocks_bound = static_cast<int64_t>(causal_);
  const int64_t item_words = 4 * static_cast<int64_t>(n);
  const int64_t desc_words = static_cast<int64_t>(H) * (sizeof(SparseHeadDesc) / 4);
  GridPlanScheduleArgs args;
  args.shape.num_heads = H;
  args.shape.q_len = q_len;
  args.shape.num_keys = N;
  args.out.order_base = -1;
  args.out.ptr_base = item_words + desc_words;
  args.out.blocks_base = args.out.cols_base = args.out.ptr_base + static_cast<int64_t>(H) * 2 * (nqb + 1);
  const int64_t words = args.out.blocks_base + blocks_bound;
  VLM_CHECK(words < (int64_t(1) << 31),
            "xattention plan on the GPU: {} heads x {} query blocks over {} keys bound {} listed blocks ({} words, "
            "limit 2^31): prefill in shorter chunks",
            H, nqb, N, blocks_bound, words);
  plan_.grow(static_cast<size_t>(words) * sizeof(int32_t));
  int32_t* const d = plan_.as<int32_t>();
  args.out.data = d;
  args.out.block_off = sc.block_off;
  args.out.col_off = sc.col_off;
  args.descs = reinterpret_cast<SparseHeadDesc*>(d + item_words);
  // The schedule (one CTA; the CUB sort first for more items than it sorts), then the lists and
  // pointers at the scanned offsets.
  grid_plan_run_schedule(sc, args, shape_.t0, blocks_bound + n, count_acc, temp_, split_, partial_, view_, stream);
  xattn_fill(keep_.as<uint32_t>(), sc.block_off, n, nqb, shape_.words(), d + args.out.blocks_base,
             d + args.out.ptr_base, stream);
  stream_ = stream;
}

BlockCounts CudaXAttentionPlan::block_counts() const { return download_block_counts(totals_, causal_, stream_); }

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
