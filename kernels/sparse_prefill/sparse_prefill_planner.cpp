#include "kernels/sparse_prefill/sparse_prefill_planner.h"

#include <algorithm>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/sparse_prefill/a_shape.h"
#include "kernels/sparse_prefill/last_q_attention.h"
#include "kernels/sparse_prefill/rank_head_patterns.h"
#include "kernels/sparse_prefill/vertical_slash.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

void gather_head_keys(const PagedKVLayer& kv, const int32_t* table, int kvh, int n, float* keys) {
  const int B = kv.block_size, D = kv.head_dim;
  const size_t esize = dtype_size(kv.dtype);
  for (int j0 = 0; j0 < n; j0 += B) {  // one cache block at a time (rows are contiguous there)
    const int rows = std::min(B, n - j0);
    const int64_t elem = table[j0 / B] * kv.block_stride() + kvh * kv.head_stride();
    convert_to_f32(static_cast<const uint8_t*>(kv.k) + elem * esize, kv.dtype,
                   keys + static_cast<size_t>(j0) * D, static_cast<int64_t>(rows) * D);
  }
}

namespace {

bool mixed_modalities(const ChunkView& c) {
  if (!c.modalities) return false;
  for (int j = 1; j < c.num_keys; ++j)
    if (c.modalities[j] != c.modalities[0]) return true;
  return false;
}

// The chunk's last rows of head h (positions pos) gathered: rows[R, D].
void last_rows(const ChunkView& c, int H, int h, int D, int R, std::vector<float>& rows,
               std::vector<int32_t>& pos) {
  rows.resize(static_cast<size_t>(R) * D);
  pos.resize(R);
  for (int r = 0; r < R; ++r) {
    const int row = c.q_len - R + r;
    pos[r] = c.num_keys - c.q_len + row;
    std::copy_n(c.q + (static_cast<size_t>(row) * H + h) * D, D, rows.data() + static_cast<size_t>(r) * D);
  }
}

}  // namespace

HeadPlan build_head_plan(const HeadPattern& pat, const ChunkView& c, int H, int h, const float* keys, int D,
                         float scale, int block, int last_q) {
  last_q = std::min(last_q, c.q_len);
  if (pat.boundary != BoundaryKind::None && mixed_modalities(c)) {
    BoundaryParams bp;
    bp.vertical_size = pat.vertical_size;
    bp.slash_size = pat.slash_size;
    bp.last_q = last_q;
    const auto lines = estimate_boundary_lines(pat.boundary, c.modalities, c.q, H, h, c.q_len, keys, c.num_keys,
                                               D, scale, bp);
    return boundary_head_plan(lines, c.modalities, c.q_len, c.num_keys, block);
  }
  switch (pat.type) {
    case HeadPatternType::Dense:
      return dense_head_plan(c.q_len, c.num_keys, block, block);
    case HeadPatternType::AShape:
      return a_shape_head_plan(c.q_len, c.num_keys, block, pat.n_init, pat.n_local);
    case HeadPatternType::VerticalSlash: {
      std::vector<float> rows;
      std::vector<int32_t> pos;
      last_rows(c, H, h, D, last_q, rows, pos);
      VerticalSlashParams prm;
      prm.vertical_size = pat.vertical_size;
      prm.slash_size = pat.slash_size;
      prm.last_q = last_q;
      const auto idx = estimate_vertical_slash(rows.data(), last_q, keys, c.num_keys, D, scale, prm);
      return vertical_slash_head_plan(idx, c.q_len, c.num_keys, block);
    }
    case HeadPatternType::Grid: {
      const int R = std::min(pat.grid.last_q, c.q_len);
      std::vector<float> rows, probs(static_cast<size_t>(R) * c.num_keys);
      std::vector<int32_t> pos;
      last_rows(c, H, h, D, R, rows, pos);
      last_q_attention(rows.data(), pos.data(), R, keys, c.num_keys, D, scale, probs.data());
      const GridLayout layout = search_grid(probs.data(), pos.data(), R, c.num_keys, pat.grid, c.frame_strides);
      return grid_head_plan(layout, pat.grid, c.q_len, c.num_keys, block);
    }
    case HeadPatternType::XAttention: {
      const auto blk = xattention_block_scores(c.q, H, h, c.q_len, keys, c.num_keys, D, scale, block,
                                               pat.xattention.stride);
      const int prompt_len = std::max(c.prompt_len, c.num_keys);
      return xattention_select(blk, c.q_len, c.num_keys, block, pat.xattention.threshold,
                               prompt_len - std::max(0, pat.xattention.n_last));
    }
  }
  return dense_head_plan(c.q_len, c.num_keys, block, block);
}

BlockSparsePlan build_sparse_plan(const SparsePrefillConfig& cfg, const ChunkView& c,
                                  int H, const PagedKVLayer& kv, float scale) {
  VLM_CHECK(cfg.enabled() && cfg.block > 0, "sparse plan for method {} block {}",
            sparse_prefill_method_name(cfg.method), cfg.block);
  VLM_CHECK(c.q_len > 0 && c.num_keys >= c.q_len, "chunk q_len {} keys {}", c.q_len, c.num_keys);
  BlockSparsePlan p;
  p.q_len = c.q_len;
  p.num_keys = c.num_keys;
  p.block_m = p.block_n = cfg.block;
  p.heads.resize(H);
  const int prompt_len = std::max(c.prompt_len, c.num_keys);
  if (cfg.method == SparsePrefillMethod::AShape) {
    p.heads.assign(H, a_shape_head_plan(c.q_len, c.num_keys, cfg.block, cfg.n_init, cfg.n_local));
    return p;
  }
  if (cfg.method == SparsePrefillMethod::TriShape) {
    p.heads.assign(H, tri_shape_head_plan(c.q_len, c.num_keys, cfg.block, cfg.n_init, cfg.n_local,
                                          cfg.n_last, prompt_len));
    return p;
  }
  // Estimating patterns: the pattern of each head (the model's head c.head_begin + h).
  const std::vector<HeadPattern> pats = rank_head_patterns(cfg, c.layer, c.head_begin, H);
  const int Hkv = kv.num_kv_heads, G = H / Hkv, D = kv.head_dim;
  // One task per query head; keys gathered once per kv head (shared by its G heads).
  std::vector<std::vector<float>> keys(Hkv);
  global_thread_pool().run_tasks(Hkv, [&](int64_t kvh) {
    bool needed = false;
    for (int g = 0; g < G; ++g) {
      const HeadPattern& pt = pats[kvh * G + g];
      needed |= pt.boundary != BoundaryKind::None ||
                (pt.type != HeadPatternType::Dense && pt.type != HeadPatternType::AShape);
    }
    if (!needed) return;
    keys[kvh].resize(static_cast<size_t>(c.num_keys) * D);
    gather_head_keys(kv, c.block_table, static_cast<int>(kvh), c.num_keys, keys[kvh].data());
  });
  global_thread_pool().run_tasks(H, [&](int64_t h) {
    const auto& k = keys[h / G];
    p.heads[h] = build_head_plan(pats[h], c, H, static_cast<int>(h), k.empty() ? nullptr : k.data(), D, scale,
                                 cfg.block, cfg.last_q);
  });
  return p;
}

}  // namespace vlm
