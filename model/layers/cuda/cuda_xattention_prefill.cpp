#include "model/layers/cuda/cuda_xattention_prefill.h"

#include <algorithm>

#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"

namespace vlm {
namespace {

bool same_params(const XAttentionParams& a, const XAttentionParams& b) {
  return a.stride == b.stride && a.threshold == b.threshold && a.n_last == b.n_last;
}

bool is_xattention(const HeadPattern& p) {
  return p.type == HeadPatternType::XAttention && p.boundary == BoundaryKind::None;
}

}  // namespace

void CudaXAttentionPrefill::estimate(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats,
                                     const void* q, DType act, const PagedKVLayer& kv,
                                     const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream) {
  const int H = static_cast<int>(pats.size()), t0 = b.cu_seqlens_q[s], q_len = b.cu_seqlens_q[s + 1] - t0,
            N = b.context_lens[s];
  const int prompt_len = std::max(b.prompt_lens.empty() ? N : b.prompt_lens[s], N);
  plan_.begin(H, t0, q_len, N, stream);
  std::vector<uint8_t> done(H, 0);
  std::vector<int> heads;
  for (int h = 0; h < H; ++h) {
    if (!is_xattention(pats[h]) || done[h]) continue;
    heads.clear();
    for (int g = h; g < H; ++g)
      if (is_xattention(pats[g]) && !done[g] && same_params(pats[g].xattention, pats[h].xattention))
        heads.push_back(g), done[g] = 1;
    const XAttentionParams& p = pats[h].xattention;
    plan_.estimate(q, act, kv, meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq, heads, p,
                   prompt_len - std::max(0, p.n_last), scale, stream);
  }
  if (marker) marker("xattn_estimate");
}

bool CudaXAttentionPrefill::device_planned(const ForwardBatch& b, const std::vector<HeadPattern>& pats,
                                           const void* q, DType act, const PagedKVLayer& kv,
                                           const cuda::CudaAttentionBatch& meta, float scale, void* out,
                                           cudaStream_t stream, CudaSparseCounts& counts) {
  if (b.num_seqs() != 1 || pats.empty()) return false;
  for (const HeadPattern& p : pats)
    if (!is_xattention(p) || !same_params(p.xattention, pats[0].xattention)) return false;
  estimate(b, 0, pats, q, act, kv, meta, scale, stream);
  unsigned long long* acc = counts.counter(b.sparse_block_counts.empty() ? nullptr : b.sparse_block_counts[0], stream);
  plan_.build(stream, acc);
  if (acc) counts.add_causal(plan_.causal_blocks());
  if (marker) marker("sparse_plan");
  cuda::paged_block_sparse_attention(q, act, static_cast<int>(pats.size()), kv, meta, plan_.view(), scale, out,
                                     stream);
  if (marker) marker("sparse_kernel");
  return true;
}

std::vector<HeadPlan> CudaXAttentionPrefill::host_plans(const ForwardBatch& b, int s,
                                                        const std::vector<HeadPattern>& pats, const void* q, DType act,
                                                        const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta,
                                                        float scale, cudaStream_t stream) {
  const int H = static_cast<int>(pats.size());
  std::vector<HeadPlan> plans(H);
  std::vector<int> heads;
  for (int h = 0; h < H; ++h)
    if (is_xattention(pats[h])) heads.push_back(h);
  if (heads.empty()) return plans;
  estimate(b, s, pats, q, act, kv, meta, scale, stream);
  std::vector<HeadPlan> got = plan_.host_plans(heads, stream);
  for (size_t i = 0; i < heads.size(); ++i) plans[heads[i]] = std::move(got[i]);
  return plans;
}

}  // namespace vlm
