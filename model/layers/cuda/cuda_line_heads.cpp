#include "model/layers/cuda/cuda_line_heads.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

int q_len_of(const ForwardBatch& b, int s) { return b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s]; }

VerticalSlashParams vs_params(const HeadPattern& pt, const SparsePrefillConfig& cfg) {
  VerticalSlashParams p;
  p.vertical_size = pt.vertical_size;
  p.slash_size = pt.slash_size;
  p.last_q = cfg.last_q;
  return p;
}

}  // namespace

bool CudaLineHeads::load_codes(const ForwardBatch& b, int s) {
  const int N = b.context_lens[s];
  codes_.assign(N, static_cast<uint8_t>(Modality::Text));
  if (s < static_cast<int>(b.prompt_modalities.size()))
    for (int j = 0; j < std::min<int>(N, static_cast<int>(b.prompt_modalities[s].size())); ++j)
      codes_[j] = static_cast<uint8_t>(b.prompt_modalities[s][j].modality);
  mixed_ = std::any_of(codes_.begin(), codes_.end(), [&](uint8_t c) { return c != codes_[0]; });
  return mixed_;
}

cuda::GridEstimateShape CudaLineHeads::shape(const ForwardBatch& b, int s, int H) const {
  cuda::GridEstimateShape sh;
  sh.num_heads = H;
  sh.t0 = b.cu_seqlens_q[s];
  sh.q_len = q_len_of(b, s);
  sh.num_keys = b.context_lens[s];
  sh.rows = std::min(b.sparse_prefill[s].last_q, sh.q_len);
  return sh;
}

void CudaLineHeads::estimate_vertical_slash(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats,
                                            const void* q, DType act, const PagedKVLayer& kv,
                                            const cuda::CudaAttentionBatch& meta, float scale, cudaStream_t stream) {
  const int H = static_cast<int>(pats.size());
  std::vector<VerticalSlashParams> params(H);
  for (int h = 0; h < H; ++h) params[h] = vs_params(pats[h], b.sparse_prefill[s]);
  vs_.estimate(q, act, kv, meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq, shape(b, s, H),
               scale, params, stream);
}

void CudaLineHeads::plan(const ForwardBatch& b, int s, const std::vector<HeadPattern>& pats, const void* q, DType act,
                         const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale,
                         cudaStream_t stream, std::vector<HeadPlan>& heads, std::vector<uint8_t>& planned) {
  const int H = static_cast<int>(pats.size()), q_len = q_len_of(b, s), N = b.context_lens[s];
  const int blk = b.sparse_prefill[s].block;
  bool want_vs = false, want_q = false, want_2d = false;
  for (const HeadPattern& pt : pats) {
    if (!line_head(pt)) continue;
    const bool boundary = pt.boundary != BoundaryKind::None && mixed_;
    want_vs |= !boundary;
    want_q |= boundary && pt.boundary == BoundaryKind::Q;
    want_2d |= boundary && pt.boundary == BoundaryKind::TwoD;
  }
  if (!want_vs && !want_q && !want_2d) return;
  if (want_vs) {
    estimate_vertical_slash(b, s, pats, q, act, kv, meta, scale, stream);
    vs_.download(stream);
  }
  if (want_q || want_2d) {
    std::vector<BoundaryParams> params(H);
    for (int h = 0; h < H; ++h) {
      params[h].vertical_size = pats[h].vertical_size;
      params[h].slash_size = pats[h].slash_size;
      params[h].last_q = std::min(b.sparse_prefill[s].last_q, q_len);
    }
    boundary_.estimate(q, act, kv, meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq,
                       shape(b, s, H), scale, codes_.data(), want_q, want_2d, params, stream);
    boundary_.download(stream);
  }
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  global_thread_pool().run_tasks(H, [&](int64_t h) {
    const HeadPattern& pt = pats[h];
    if (!line_head(pt)) return;
    if (pt.boundary != BoundaryKind::None && mixed_)
      heads[h] = boundary_head_plan(boundary_.lines(pt.boundary, static_cast<int>(h)), codes_.data(), q_len, N, blk);
    else
      heads[h] = vertical_slash_head_plan(vs_.indices(static_cast<int>(h)), q_len, N, blk);
    planned[h] = 1;
  });
}

bool CudaLineHeads::device_planned(const ForwardBatch& b, const std::vector<HeadPattern>& pats, const void* q,
                                   DType act, const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta,
                                   float scale, void* out, cudaStream_t stream, CudaSparseCounts& counts) {
  for (const HeadPattern& pt : pats)
    if (pt.type != HeadPatternType::VerticalSlash) return false;
  load_codes(b, 0);
  for (const HeadPattern& pt : pats)
    if (pt.boundary != BoundaryKind::None && mixed_) return false;
  estimate_vertical_slash(b, 0, pats, q, act, kv, meta, scale, stream);
  unsigned long long* acc = counts.counter(b.sparse_block_counts.empty() ? nullptr : b.sparse_block_counts[0], stream);
  vs_plan_.build(vs_, b.cu_seqlens_q[0], q_len_of(b, 0), b.context_lens[0], stream, acc);
  if (acc) counts.add_causal(vs_plan_.causal_blocks());
  cuda::paged_block_sparse_attention(q, act, static_cast<int>(pats.size()), kv, meta, vs_plan_.view(), scale, out,
                                     stream);
  return true;
}

}  // namespace vlm
