// paged_block_sparse_attention (kernels/cuda/attention/cuda_block_sparse.h) against
//  - the dense tensor-core prefill kernel with all-blocks plans (the same tiles and order),
//  - the CPU's block_sparse_attention_ref with random plans (permuted rows and keys, unaligned key
//    block starts, gathered columns, empty query blocks, chunks over cached context, GQA 1/4/7,
//    D 64/128, a sequence without a plan left untouched),
//  - the CPU reference with the plans the CPU planners make (A-shape, tri-shape,
//    vertical-slash, grid, XAttention, MMInference with boundary heads over modality tags) on
//    video-structured input.
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/cuda/attention/cuda_block_sparse.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::decode;
using testing::encode;
using testing::to_device;

struct Seq {
  int q_len, ctx;
};

// Normalized error max|a - b| / max|ref| (non-finite: +inf).
double normalized_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double err = 0, mag = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::isfinite(got[i]) ? std::abs(double(got[i]) - ref[i]) : INFINITY);
    mag = std::max(mag, std::abs(double(ref[i])));
  }
  return err / mag;
}

// One batch of sequences over a bf16 paged cache (shuffled blocks), on the host and the GPU.
// structured: the video-structured input of bench_sparse_prefill (frames of 256 tokens after a
// 200-token prefix: a key direction per spatial index, sink keys, one salient index) so the
// estimating planners find real structure; else uniform noise.
struct Batch {
  std::vector<Seq> seqs;
  int H, Hkv, D, B = 16, T = 0, max_blocks = 0, max_q = 0, max_ctx = 0;
  DType act;
  std::vector<int32_t> cu{0}, ctx, tables;
  std::vector<float> q;  // [T, H, D] rounded through act
  std::vector<uint8_t> q_act, hk, hv;
  PagedKVLayer host_kv, dev_kv;
  cuda::DeviceBuffer dk, dv, dq, dcu, dctx, dtables;
  cuda::CudaAttentionBatch batch;
  AttentionBatch cpu_batch;

  Batch(std::vector<Seq> s, int h, int hkv, int d, DType a, uint32_t seed, bool structured = false)
      : seqs(std::move(s)), H(h), Hkv(hkv), D(d), act(a) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    int total = 2;
    for (const Seq& x : seqs) {
      max_blocks = std::max(max_blocks, (x.ctx + B - 1) / B);
      total += (x.ctx + B - 1) / B;
      T += x.q_len;
      max_q = std::max(max_q, x.q_len);
      max_ctx = std::max(max_ctx, x.ctx);
    }
    std::vector<int32_t> pool(total);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    tables.assign(seqs.size() * max_blocks, -1);
    host_kv.dtype = DType::BF16;
    host_kv.num_blocks = total;
    host_kv.block_size = B;
    host_kv.num_kv_heads = Hkv;
    host_kv.head_dim = D;
    const size_t bytes = size_t(total) * host_kv.block_stride() * 2;
    hk.assign(bytes, 0xff);  // NaN: a key read that should not happen poisons the output
    hv.assign(bytes, 0xff);
    host_kv.k = hk.data();
    host_kv.v = hv.data();
    std::vector<float> dirs(256 * 32);
    for (float& x : dirs) x = uni(rng);
    auto structure = [&](int pos, int dd, bool key) -> float {
      if (!structured) return 0.f;
      if (pos < 200) return dd < 8 && (!key || pos < 4) ? 2.5f : 0.f;
      const int x = (pos - 200) % 256;
      if (dd < 8) return key ? (x == 77 ? 2.f : 0.f) : 2.5f;
      return dd < 40 ? 6.f * dirs[x * 32 + dd - 8] : 0.f;
    };
    for (size_t si = 0, next = 0; si < seqs.size(); ++si) {
      const Seq& x = seqs[si];
      cu.push_back(cu.back() + x.q_len);
      ctx.push_back(x.ctx);
      for (int j = 0; j < (x.ctx + B - 1) / B; ++j) tables[si * max_blocks + j] = pool[next++];
      std::vector<float> k(size_t(x.ctx) * Hkv * D), v(k.size());
      std::vector<int32_t> slots(x.ctx);
      for (int j = 0; j < x.ctx; ++j) {
        slots[j] = tables[si * max_blocks + j / B] * B + j % B;
        for (int hh = 0; hh < Hkv; ++hh)
          for (int dd = 0; dd < D; ++dd) {
            k[(size_t(j) * Hkv + hh) * D + dd] = 0.5f * uni(rng) + structure(j, dd, true);
            v[(size_t(j) * Hkv + hh) * D + dd] = uni(rng);
          }
      }
      write_kv(host_kv, k.data(), v.data(), slots.data(), x.ctx);
      for (int r = 0; r < x.q_len; ++r)
        for (int hh = 0; hh < H; ++hh)
          for (int dd = 0; dd < D; ++dd) q.push_back(0.5f * uni(rng) + structure(x.ctx - x.q_len + r, dd, false));
    }
    q_act = encode(q, act);
    q = decode(q_act, act);
    dk = to_device(hk);
    dv = to_device(hv);
    dq = to_device(q_act);
    dcu = to_device(cu);
    dctx = to_device(ctx);
    dtables = to_device(tables);
    dev_kv = host_kv;
    dev_kv.k = dk.get();
    dev_kv.v = dv.get();
    batch.num_seqs = static_cast<int>(seqs.size());
    batch.cu_seqlens_q = dcu.as<int32_t>();
    batch.context_lens = dctx.as<int32_t>();
    batch.block_tables = dtables.as<int32_t>();
    batch.max_blocks_per_seq = max_blocks;
    batch.max_q_len = max_q;
    batch.max_context_len = max_ctx;
    cpu_batch = {batch.num_seqs, cu.data(), ctx.data(), tables.data(), max_blocks};
  }

  float scale() const { return 1.f / std::sqrt(float(D)); }

  // The GPU block-sparse output (f32), rows of unplanned sequences left at `fill`.
  std::vector<float> sparse(std::span<const BlockSparsePlan* const> plans, float fill = 0.f) {
    cuda::CudaBlockSparsePlan plan;
    plan.upload(plans, cu.data(), H, nullptr);
    const std::vector<float> init(q.size(), fill);
    cuda::DeviceBuffer out = to_device(encode(init, act));
    cuda::paged_block_sparse_attention(dq.get(), act, H, dev_kv, batch, plan, scale(), out.get(), nullptr);
    return decode(testing::to_host<uint8_t>(out, q.size() * dtype_size(act)), act);
  }
  std::vector<float> dense_gpu() {
    cuda::DeviceBuffer out(q_act.size());
    cuda::paged_prefill_attention(dq.get(), act, H, dev_kv, batch, scale(), out.get(), nullptr);
    return decode(testing::to_host<uint8_t>(out, q_act.size()), act);
  }
  std::vector<float> cpu_ref(std::span<const BlockSparsePlan* const> plans, float fill = 0.f) {
    std::vector<float> out(q.size(), fill);
    block_sparse_attention_ref(q.data(), H, host_kv, cpu_batch, plans, scale(), out.data());
    return out;
  }
};

// bf16 cache: the tolerance of the dense kernel's test, plus the output rounding of bf16 rows.
double tolerance(DType act) { return 2e-2 + (act == DType::F32 ? 0.0 : 8e-3); }

TEST(CudaBlockSparse, AllBlocksPlanEqualsDenseKernel) {
  VLM_REQUIRE_GPU();
  struct C {
    std::vector<Seq> seqs;
    int H, Hkv, D;
    DType act;
  };
  const std::vector<C> cases = {
      {{{37, 37}, {64, 64}, {300, 300}, {1, 1}}, 8, 2, 128, DType::BF16},
      {{{50, 300}, {129, 1000}, {64, 200}}, 14, 2, 64, DType::F32},
      {{{300, 1200}}, 28, 4, 128, DType::BF16},
  };
  uint32_t seed = 1;
  for (const C& c : cases) {
    Batch b(c.seqs, c.H, c.Hkv, c.D, c.act, seed++);
    std::vector<BlockSparsePlan> plans;
    for (const Seq& s : c.seqs) plans.push_back(dense_plan(s.q_len, s.ctx, c.H));
    std::vector<const BlockSparsePlan*> ptrs;
    for (const auto& p : plans) ptrs.push_back(&p);
    const auto got = b.sparse(ptrs), dense = b.dense_gpu();
    const double err = normalized_error(got, dense);
    RecordProperty("err_vs_dense", std::to_string(err));
    EXPECT_LE(err, 1e-3) << "all-blocks plan vs dense kernel, H " << c.H << " D " << c.D;
    EXPECT_LE(normalized_error(got, b.cpu_ref(ptrs)), tolerance(c.act)) << "all-blocks plan vs CPU reference";
  }
}

// A random well-formed plan: random permutations (or identity), per query block a random set of
// disjoint key ranges of 64 (aligned or not), random gathered columns outside them, some query
// blocks empty.
BlockSparsePlan random_plan(int q_len, int N, int H, std::mt19937& rng, bool permute) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int h = 0; h < H; ++h) {
    HeadPlan hp = empty_head_plan(p.num_qblocks());
    if (permute && h % 2 == 0) {
      hp.q_order.resize(q_len);
      std::iota(hp.q_order.begin(), hp.q_order.end(), 0);
      std::shuffle(hp.q_order.begin(), hp.q_order.end(), rng);
    }
    if (permute && h % 3 != 2) {
      hp.k_order.resize(N);
      std::iota(hp.k_order.begin(), hp.k_order.end(), 0);
      std::shuffle(hp.k_order.begin(), hp.k_order.end(), rng);
    }
    const float keep = 0.15f + 0.7f * u(rng);
    for (int m = 0; m < p.num_qblocks(); ++m) {
      std::vector<uint8_t> covered(N, 0);
      if (u(rng) > 0.1f) {  // else an empty query block: zero rows
        for (int k0 = int(u(rng) * 40); k0 < N;) {
          if (u(rng) < keep) {
            hp.blocks.push_back(k0);
            for (int i = k0; i < std::min(N, k0 + 64); ++i) covered[hp.k_order.empty() ? i : hp.k_order[i]] = 1;
            k0 += 64;
          }
          k0 += 1 + (u(rng) < 0.5f ? 63 : int(u(rng) * 100));
        }
        for (int j = 0; j < N; ++j)
          if (!covered[j] && u(rng) < 0.05f) hp.cols.push_back(j);
      }
      hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
      hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
    }
    p.heads.push_back(std::move(hp));
  }
  validate_plan(p);
  return p;
}

TEST(CudaBlockSparse, RandomPlansMatchCpuReference) {
  VLM_REQUIRE_GPU();
  struct C {
    std::vector<Seq> seqs;
    int H, Hkv, D;
    DType act;
    bool permute;
  };
  const std::vector<C> cases = {
      {{{300, 300}, {77, 77}}, 8, 2, 128, DType::BF16, false},
      {{{300, 300}, {100, 500}, {5, 260}}, 8, 2, 128, DType::BF16, true},
      {{{200, 900}, {129, 129}}, 7, 1, 64, DType::F32, true},
      {{{250, 250}, {64, 640}}, 4, 4, 64, DType::BF16, true},
  };
  uint32_t seed = 10;
  for (const C& c : cases) {
    std::mt19937 rng(seed);
    Batch b(c.seqs, c.H, c.Hkv, c.D, c.act, seed++);
    std::vector<BlockSparsePlan> plans;
    for (const Seq& s : c.seqs) plans.push_back(random_plan(s.q_len, s.ctx, c.H, rng, c.permute));
    std::vector<const BlockSparsePlan*> ptrs;
    for (const auto& p : plans) ptrs.push_back(&p);
    ptrs.back() = nullptr;  // the last sequence has no plan: its rows stay as they were
    const auto got = b.sparse(ptrs, 7.f), ref = b.cpu_ref(ptrs, 7.f);
    EXPECT_LE(normalized_error(got, ref), tolerance(c.act)) << "H " << c.H << " D " << c.D << " permute " << c.permute;
  }
}

TEST(CudaBlockSparse, CpuPlannerPlansMatchCpuReference) {
  VLM_REQUIRE_GPU();
  // One whole prompt and one chunk over earlier context; 4 query heads per kv head (few heads
  // and rows: the CPU reference is single-threaded double).
  const int H = 4;
  Batch b({{1300, 1300}, {400, 1700}}, H, 1, 128, DType::BF16, 77, /*structured=*/true);
  std::vector<uint8_t> modality(1700, 0);
  for (int j = 200; j < 1500; ++j) modality[j] = 2;  // text, video, text
  const int32_t frame[] = {256};
  std::vector<SparsePrefillConfig> cfgs(7);
  cfgs[0].method = SparsePrefillMethod::AShape;
  cfgs[0].n_local = 512;
  cfgs[1].method = SparsePrefillMethod::TriShape;
  cfgs[1].n_local = 512;
  cfgs[2].method = SparsePrefillMethod::VerticalSlash;
  cfgs[2].vertical_size = 30;  // small: 300 slashes left the plan 98 % dense at these lengths
  cfgs[2].slash_size = 100;
  cfgs[3].method = SparsePrefillMethod::Grid;
  cfgs[4].method = SparsePrefillMethod::XAttention;
  cfgs[4].xattention.threshold = 0.9f;
  cfgs[5].method = SparsePrefillMethod::MMInference;  // default head: grid, known stride
  cfgs[6].method = SparsePrefillMethod::MMInference;  // boundary heads over the modality tags
  {
    auto pats = std::make_shared<SparseHeadPatterns>();
    pats->layers.resize(1);
    for (int h = 0; h < H; ++h) {
      HeadPattern hp;
      hp.type = h % 4 == 3 ? HeadPatternType::AShape : HeadPatternType::VerticalSlash;
      hp.boundary = h % 4 == 0 ? BoundaryKind::Q : h % 4 == 1 ? BoundaryKind::TwoD : BoundaryKind::None;
      hp.vertical_size = 64;
      hp.slash_size = 256;
      hp.n_local = 256;
      pats->layers[0].push_back(hp);
    }
    cfgs[6].head_patterns = pats;
  }
  for (const auto& cfg : cfgs) {
    std::vector<BlockSparsePlan> plans;
    for (int s = 0; s < 2; ++s) {
      const int off = b.cu[s];
      ChunkView cv{b.q.data() + size_t(off) * b.H * b.D, b.seqs[s].q_len, b.seqs[s].ctx, b.seqs[s].ctx,
                   b.tables.data() + size_t(s) * b.max_blocks, 0, modality.data(), frame};
      plans.push_back(build_sparse_plan(cfg, cv, b.H, b.host_kv, b.scale()));
    }
    const BlockSparsePlan* ptrs[] = {&plans[0], &plans[1]};
    const auto got = b.sparse(ptrs), ref = b.cpu_ref(ptrs);
    const double density = plan_block_density(plans[0]);
    EXPECT_LT(density, 0.95) << sparse_prefill_method_name(cfg.method) << ": the plan should be sparse";
    EXPECT_LE(normalized_error(got, ref), tolerance(DType::BF16))
        << sparse_prefill_method_name(cfg.method) << " density " << density;
  }
}

}  // namespace
}  // namespace vlm
