#include "kernels/sparse_prefill/sparse_prefill_planner.h"

#include <algorithm>
#include <vector>

#include "kernels/check.h"
#include "kernels/sparse_prefill/a_shape.h"
#include "kernels/sparse_prefill/vertical_slash.h"
#include "kernels/thread_pool.h"

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
  switch (cfg.method) {
    case SparsePrefillMethod::AShape:
      p.heads.assign(H, a_shape_head_plan(c.q_len, c.num_keys, cfg.block, cfg.n_init, cfg.n_local));
      break;
    case SparsePrefillMethod::TriShape:
      p.heads.assign(H, tri_shape_head_plan(c.q_len, c.num_keys, cfg.block, cfg.n_init,
                                            cfg.n_local, cfg.n_last, prompt_len));
      break;
    case SparsePrefillMethod::VerticalSlash: {
      const int Hkv = kv.num_kv_heads, G = H / Hkv, D = kv.head_dim;
      const int last_q = std::min(cfg.last_q, c.q_len);
      VerticalSlashParams prm;
      prm.vertical_size = cfg.vertical_size;
      prm.slash_size = cfg.slash_size;
      prm.last_q = last_q;
      // One task per kv head: gather its keys once, then estimate its G query heads.
      global_thread_pool().run_tasks(Hkv, [&](int64_t kvh) {
        std::vector<float> keys(static_cast<size_t>(c.num_keys) * D), ql(static_cast<size_t>(last_q) * D);
        gather_head_keys(kv, c.block_table, static_cast<int>(kvh), c.num_keys, keys.data());
        for (int g = 0; g < G; ++g) {
          const int h = static_cast<int>(kvh) * G + g;
          for (int r = 0; r < last_q; ++r)
            std::copy_n(c.q + (static_cast<size_t>(c.q_len - last_q + r) * H + h) * D, D,
                        ql.data() + static_cast<size_t>(r) * D);
          const auto idx = estimate_vertical_slash(ql.data(), last_q, keys.data(), c.num_keys, D,
                                                   scale, prm);
          p.heads[h] = vertical_slash_head_plan(idx, c.q_len, c.num_keys, cfg.block);
        }
      });
      break;
    }
    case SparsePrefillMethod::Off:
      break;
  }
  return p;
}

}  // namespace vlm
