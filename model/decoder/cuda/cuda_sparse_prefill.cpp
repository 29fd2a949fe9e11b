#include "model/decoder/cuda/cuda_sparse_prefill.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "kernels/sparse_prefill/a_shape.h"

namespace vlm {
namespace {

bool same_grid(const GridParams& a, const GridParams& b) {
  return a.stride == b.stride && a.use_hline == b.use_hline && a.use_vline == b.use_vline &&
         a.use_slash == b.use_slash && a.min_stride == b.min_stride && a.max_stride == b.max_stride &&
         a.band == b.band && a.num_vlines == b.num_vlines && a.num_hlines == b.num_hlines && a.n_init == b.n_init &&
         a.last_q == b.last_q;
}

int q_len_of(const ForwardBatch& b, int s) { return b.cu_seqlens_q[s + 1] - b.cu_seqlens_q[s]; }

bool sparse_here(const ForwardBatch& b, int s) {
  return s < static_cast<int>(b.sparse_prefill.size()) && b.sparse_prefill[s].enabled() && q_len_of(b, s) > 1;
}

}  // namespace

bool CudaSparsePrefill::active(const ForwardBatch& b) {
  for (int s = 0; s < b.num_seqs(); ++s)
    if (sparse_here(b, s)) return true;
  return false;
}

BlockSparsePlan CudaSparsePrefill::plan_sequence(int layer, const ForwardBatch& b, int s, const void* q, DType act,
                                                 int H, const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta,
                                                 float scale, cudaStream_t stream) {
  const SparsePrefillConfig& cfg = b.sparse_prefill[s];
  if (!plannable_without_host_data(cfg))
    throw RequestError(400, "invalid_request_error",
                       fmt::format("sparse prefill method {} (or its head patterns) does not run on the GPU yet: it "
                                   "estimates from the chunk's data on the host",
                                   sparse_prefill_method_name(cfg.method)),
                       "vlm_options");
  if (cfg.block != 64)
    throw RequestError(400, "invalid_request_error",
                       fmt::format("sparse prefill on the GPU plans 64-token blocks, not {}", cfg.block), "vlm_options");
  const int q_len = q_len_of(b, s), N = b.context_lens[s], blk = cfg.block;
  const int prompt_len = std::max(b.prompt_lens.empty() ? N : b.prompt_lens[s], N);
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  p.block_m = p.block_n = blk;
  if (cfg.method == SparsePrefillMethod::AShape) {
    p.heads.assign(H, a_shape_head_plan(q_len, N, blk, cfg.n_init, cfg.n_local));
    return p;
  }
  if (cfg.method == SparsePrefillMethod::TriShape) {
    p.heads.assign(H, tri_shape_head_plan(q_len, N, blk, cfg.n_init, cfg.n_local, cfg.n_last, prompt_len));
    return p;
  }
  std::vector<HeadPattern> pats(H);
  for (int h = 0; h < H; ++h) {
    if (cfg.method == SparsePrefillMethod::Grid) {
      pats[h].type = HeadPatternType::Grid;
      pats[h].grid = cfg.grid;
    } else {
      const HeadPattern* f = cfg.head_patterns ? cfg.head_patterns->find(layer, h) : nullptr;
      pats[h] = f ? *f : cfg.default_head;
    }
  }
  // One device search per distinct grid parameter set (every head searched; MMInference's
  // default head makes it one).
  std::vector<GridLayout> layouts(H);
  std::vector<uint8_t> done(H, 0);
  const std::span<const int32_t> known =
      s < static_cast<int>(b.frame_strides.size()) ? b.frame_strides[s] : std::span<const int32_t>();
  for (int h = 0; h < H; ++h) {
    if (pats[h].type != HeadPatternType::Grid || done[h]) continue;
    cuda::GridEstimateShape sh;
    sh.num_heads = H;
    sh.t0 = b.cu_seqlens_q[s];
    sh.q_len = q_len;
    sh.num_keys = N;
    sh.rows = std::min(pats[h].grid.last_q, q_len);
    const auto found = grid_.search(q, act, kv, meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq,
                                    sh, scale, pats[h].grid, known, stream);
    for (int g = h; g < H; ++g)
      if (pats[g].type == HeadPatternType::Grid && !done[g] && same_grid(pats[g].grid, pats[h].grid))
        layouts[g] = found[g], done[g] = 1;
  }
  p.heads.resize(H);
  global_thread_pool().run_tasks(H, [&](int64_t h) {
    const HeadPattern& pt = pats[h];
    if (pt.type == HeadPatternType::Grid) p.heads[h] = grid_head_plan(layouts[h], pt.grid, q_len, N, blk);
    else if (pt.type == HeadPatternType::AShape) p.heads[h] = a_shape_head_plan(q_len, N, blk, pt.n_init, pt.n_local);
    else p.heads[h] = dense_head_plan(q_len, N, blk, blk);
  });
  return p;
}

void CudaSparsePrefill::attention(int layer, const ForwardBatch& b, const void* q, DType act, int H,
                                  const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, void* out,
                                  cudaStream_t stream) {
  const int S = b.num_seqs();
  std::vector<BlockSparsePlan> plans(S);
  std::vector<const BlockSparsePlan*> ptrs(S, nullptr);
  for (int s = 0; s < S; ++s) {
    const int q_len = q_len_of(b, s);
    if (q_len == 0) continue;
    if (sparse_here(b, s)) {
      plans[s] = plan_sequence(layer, b, s, q, act, H, kv, meta, scale, stream);
      if (s < static_cast<int>(b.sparse_block_counts.size()) && b.sparse_block_counts[s])
        *b.sparse_block_counts[s] += plan_block_counts(plans[s]);
    } else {
      plans[s] = dense_plan(q_len, b.context_lens[s], H);
    }
    ptrs[s] = &plans[s];
  }
  plan_.upload(ptrs, b.cu_seqlens_q.data(), H, stream);
  cuda::paged_block_sparse_attention(q, act, H, kv, meta, plan_, scale, out, stream);
}

}  // namespace vlm
