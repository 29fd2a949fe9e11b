// The batch fixture of the GPU sparse-prefill tests: sequences over a bf16 paged cache with
// shuffled blocks, on the host (for the CPU planners and references) and on the GPU.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace vlm::testing {

struct Seq {
  int q_len, ctx;
};

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
    return sparse(plan.view(), fill);
  }
  // The same over a plan view (made on the device, or uploaded).
  std::vector<float> sparse(const cuda::SparsePlanView& view, float fill = 0.f) {
    const std::vector<float> init(q.size(), fill);
    cuda::DeviceBuffer out = to_device(encode(init, act));
    cuda::paged_block_sparse_attention(dq.get(), act, H, dev_kv, batch, view, scale(), out.get(), nullptr);
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

// ---- plan generators of the GPU block-sparse tests ----

// Sets the split knob for a scope (restores the automatic policy).
struct SplitKnob {
  explicit SplitKnob(int piece_tiles) { cuda::set_block_sparse_split(piece_tiles); }
  ~SplitKnob() { cuda::set_block_sparse_split(0); }
};

// A random well-formed plan: random permutations (or identity), per query block a random set of
// disjoint key ranges of 64 (aligned or not), random gathered columns outside them, some query
// blocks empty.
inline BlockSparsePlan random_plan(int q_len, int N, int H, std::mt19937& rng, bool permute) {
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

// Per head one query block attends every causal key block (the long row), the others their
// first and diagonal key blocks and a few gathered columns.
inline BlockSparsePlan long_row_plan(int q_len, int N, int H, std::mt19937& rng) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  const int off = N - q_len, nqb = p.num_qblocks();
  for (int h = 0; h < H; ++h) {
    HeadPlan hp = empty_head_plan(nqb);
    const int long_m = static_cast<int>(rng() % nqb);
    for (int m = 0; m < nqb; ++m) {
      const int last = off + std::min(q_len, (m + 1) * 64) - 1;  // the block's last row position
      if (m == long_m) {
        for (int k0 = 0; k0 <= last; k0 += 64) hp.blocks.push_back(k0);
      } else {
        const int diag = (off + m * 64) / 64 * 64;
        hp.blocks.push_back(0);
        if (diag > 0) hp.blocks.push_back(diag);
        for (int j = 64 + static_cast<int>(rng() % 64); j < std::min(diag, 400); j += 50) hp.cols.push_back(j);
      }
      hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
      hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
    }
    p.heads.push_back(std::move(hp));
  }
  validate_plan(p);
  return p;
}

// Permuted rows and keys; per head two query blocks list every aligned key block (the kernel
// takes their keys in position order, not k_order: the same keys), the others two random ones;
// the last head's key blocks start off the 64-grid (never taken in position order).
inline BlockSparsePlan every_key_plan(int q_len, int N, int H, std::mt19937& rng) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  const int nqb = p.num_qblocks(), nkb = p.num_kblocks();
  for (int h = 0; h < H; ++h) {
    HeadPlan hp = empty_head_plan(nqb);
    hp.q_order.resize(q_len);
    std::iota(hp.q_order.begin(), hp.q_order.end(), 0);
    std::shuffle(hp.q_order.begin(), hp.q_order.end(), rng);
    hp.k_order.resize(N);
    std::iota(hp.k_order.begin(), hp.k_order.end(), 0);
    std::shuffle(hp.k_order.begin(), hp.k_order.end(), rng);
    const int m0 = static_cast<int>(rng() % nqb), m1 = static_cast<int>(rng() % nqb);
    const int shift = h == H - 1 ? 1 : 0;  // unaligned starts: k0 = 1, 65, ... (N - 1 keys)
    for (int m = 0; m < nqb; ++m) {
      if (m == m0 || m == m1) {
        for (int b = 0; b < nkb; ++b)
          if (b * 64 + shift < N) hp.blocks.push_back(b * 64 + shift);
      } else {
        const int b0 = static_cast<int>(rng() % nkb), b1 = static_cast<int>(rng() % nkb);
        hp.blocks.push_back(std::min(b0, b1) * 64);
        if (b1 != b0) hp.blocks.push_back(std::max(b0, b1) * 64);
      }
      hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
      hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
    }
    p.heads.push_back(std::move(hp));
  }
  validate_plan(p);
  return p;
}

// n int32 words of device memory, once the device has finished its work.
inline std::vector<int32_t> download(const void* d, int64_t n) {
  std::vector<int32_t> v(n);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  if (n > 0) VLM_CUDA_CHECK(cudaMemcpy(v.data(), d, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return v;
}

inline std::vector<int32_t> slice(const std::vector<int32_t>& data, int64_t at, int64_t n) {
  return {data.begin() + at, data.begin() + at + n};
}

// A device-built plan view v against the same plans uploaded (uv, CudaBlockSparsePlan::upload):
// the same work items in the same order and the same split (piece and slot offsets; the upload
// lists none when it split nothing: one piece per item then), and room for its pieces.
inline void expect_same_items_and_split(const cuda::SparsePlanView& v, const cuda::SparsePlanView& uv) {
  EXPECT_EQ(download(v.items, 4 * int64_t(v.num_items)), download(uv.items, 4 * int64_t(uv.num_items)));
  std::vector<int32_t> want_pieces(v.num_items + 1), want_slots(v.num_items + 1, 0);
  std::iota(want_pieces.begin(), want_pieces.end(), 0);
  if (uv.piece_off) {
    want_pieces = download(uv.piece_off, v.num_items + 1);
    want_slots = download(uv.slot_off, v.num_items + 1);
  }
  ASSERT_NE(v.piece_off, nullptr);
  EXPECT_EQ(download(v.piece_off, v.num_items + 1), want_pieces);
  EXPECT_EQ(download(v.slot_off, v.num_items + 1), want_slots);
  EXPECT_GE(v.max_pieces, want_pieces.back());
}

}  // namespace vlm::testing
