// The query-tile loop of the Hopper prefill attention (sm_90a, D = 128, 16-bit cache), as a
// device function over any list of key tiles, so that the dense causal kernel
// (prefill_attention_sm90.cu) and a block-sparse one share it.
//
// One CTA = 2 warpgroups = 128 query rows of one (sequence, query head); warpgroup w owns rows
// 64w..64w+63 and their O accumulators (64 x 128 f32, in registers). Per key tile of 128 keys:
// S = Q K^T by 8 wgmma (m64n128k16, Q and K from shared memory), causal mask on the tiles that
// cross the diagonal, online softmax in registers (mma_tile.cuh), O += P V by 8 wgmma with P
// from registers and V from shared memory. K/V tiles stream through two shared-memory stages by
// cp.async from the paged cache, the next tile's copy in flight during the current tile's math.
// Shared memory: Q 32 KiB + 2 x (K 32 KiB + V 32 KiB) = 160 KiB (+1 KiB for alignment).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention/paged_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/attention/wgmma_tile.cuh"

namespace vlm::cuda::wg {

constexpr int kD = 128;        // head dim
constexpr int kBM = 128;       // query rows per CTA
constexpr int kBN = 128;       // keys per tile
constexpr int kThreads = 256;  // 2 warpgroups
constexpr int kTileElems = kBN * kD;
constexpr int kSmemBytes = (kBM * kD + 2 * 2 * kTileElems) * 2 + 1024;

// The dense causal list: key tiles 0 .. n-1 (all tiles up to the query tile's last position).
// A key-tile list is anything with count() and operator[](i) -> tile index (keys
// [kBN * index, kBN * index + kBN)), in increasing order; tiles past a row's position are masked
// causally whatever the list says.
struct CausalKeyTiles {
  int n;
  __device__ __forceinline__ int count() const { return n; }
  __device__ __forceinline__ int operator[](int i) const { return i; }
};

// One CTA's query tile: rows [m0, m0 + rows) of sequence s (token rows t0 + ..), query head h,
// KV head hk; the first row sits at position pos0 (keys [0, pos0 + r] visible to row r).
struct QueryTile {
  int t0, m0, rows, pos0, h, hk, H;
  const int32_t* table;  // the sequence's block table
};

// Online softmax of one warp's 16 rows of a 128-key tile without touching O: s holds raw scores
// (masked ones -inf) and becomes exp2(s * scale_log2 - m_new); m, l are updated and corr gets the
// factor by which the caller rescales O (rows g and g+8 of the thread: index 0 and 1).
__device__ __forceinline__ void softmax_tile(float (&s)[16][4], float (&m)[2], float (&l)[2], float (&corr)[2],
                                             float scale_log2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[r], mx * scale_log2);
    const float base = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: no inf - inf
    corr[r] = tile::fast_exp2(m[r] - base);
    m[r] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      s[j][2 * r] = tile::fast_exp2(fmaf(s[j][2 * r], scale_log2, -base));
      s[j][2 * r + 1] = tile::fast_exp2(fmaf(s[j][2 * r + 1], scale_log2, -base));
      sum += s[j][2 * r] + s[j][2 * r + 1];
    }
    l[r] = l[r] * corr[r] + sum;  // per-thread partial; the quad's sum is taken at the end
  }
}

// Attends the query tile to the key tiles `tiles` and writes its rows of out (normalized).
// q, out [T, H, 128] (TQ); the cache's element type T (bf16/f16). smem: kSmemBytes of dynamic
// shared memory. All kThreads threads call it.
template <class T, class TQ, class Tiles>
__device__ __forceinline__ void attend_query_tile(const TQ* __restrict__ q, TQ* __restrict__ out, const KVView& kv,
                                                  const QueryTile& qt, const Tiles& tiles, float scale_log2,
                                                  unsigned char* smem_raw) {
  // 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes).
  T* const sq = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  T* const skv = sq + kBM * kD;
  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int n_tiles = tiles.count();  // >= 1
  const int key_end = qt.pos0 + qt.rows;  // keys [0, key_end) are visible to some row

  // Q tile -> shared (rows past the query tile are zero).
  for (int i = tid; i < kBM * 16; i += kThreads) {
    const int r = i >> 4, c = i & 15;
    T* dst = sq + sw128<kBM>(r, c);
    const TQ* src = q + (int64_t(qt.t0 + qt.m0 + r) * qt.H + qt.h) * kD + c * 8;
    if constexpr (std::is_same_v<T, TQ>) {
      tile::cp_async16(dst, r < qt.rows ? src : q, r < qt.rows ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = from_f32<T>(r < qt.rows ? to_f32(src[e]) : 0.f);
    }
  }
  // Stages: K at skv + i kTileElems, V at skv + (2 + i) kTileElems (i = 0, 1).
  auto sk_stage = [&](int i) { return skv + i * kTileElems; };
  auto sv_stage = [&](int i) { return skv + (2 + i) * kTileElems; };
  if (n_tiles > 0) load_rows<kBN, kThreads>(kv, kv.k, qt.table, qt.hk, tiles[0] * kBN, key_end, sk_stage(0), tid);
  tile::cp_async_commit();

  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int warp_pos = qt.pos0 + wgi * 64 + warp * 16;  // position of the warp's first row

  // Software pipeline over the key tiles, the same straight-line code in every warpgroup (wgmma
  // in a branch that the compiler cannot prove uniform is serialized), every warpgroup taking
  // every tile (a tile wholly after a warpgroup's rows is masked away):
  //   pass i copies K of tile i+1 and V of tile i (one cp.async group, complete at pass i+1);
  //   the tensor cores run S_i = Q K_i^T, then O += P_{i-1} V_{i-1}, both in flight together; the
  //   softmax of S_i runs while P_{i-1} V_{i-1} is still on the tensor cores, and O is rescaled
  //   once that product is done.
  auto top = [&](int i) {  // the copies of pass i-1 landed for everyone; stages read before are free
    tile::cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (i < n_tiles) {
      if (i + 1 < n_tiles)
        load_rows<kBN, kThreads>(kv, kv.k, qt.table, qt.hk, tiles[i + 1] * kBN, key_end, sk_stage((i + 1) & 1), tid);
      load_rows<kBN, kThreads>(kv, kv.v, qt.table, qt.hk, tiles[i] * kBN, key_end, sv_stage(i & 1), tid);
      tile::cp_async_commit();
    }
  };
  float s[16][4];
  uint32_t p[8][4];
  auto issue_s = [&](int i) {
    fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      mma_ss<T>(s, desc_k_major<kBM>(sq, wgi * 64, kk), desc_k_major<kBN>(sk_stage(i & 1), 0, kk), kk > 0);
    commit();
  };
  auto issue_pv = [&](int i) {
    fence_regs(o);
    fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) mma_rs_mn<T>(o, p[kk], desc_mn_major<kBN>(sv_stage(i & 1), kk));
    commit();
  };
  float corr[2];
  auto softmax = [&](int i) {  // S_i has landed
    fence_regs(s);
    const int key0 = tiles[i] * kBN;
    if (key0 + kBN - 1 > warp_pos) {  // the causal diagonal crosses the warp's rows
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + j * 8 + 2 * t4 + (e & 1);
          if (key > warp_pos + g + 8 * (e >> 1)) s[j][e] = -INFINITY;
        }
    }
    softmax_tile(s, m, l, corr, scale_log2);
  };
  auto rescale_and_pack = [&] {  // O is not in flight
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      o[j][0] *= corr[0];
      o[j][1] *= corr[0];
      o[j][2] *= corr[1];
      o[j][3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      p[kk][0] = tile::pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      p[kk][1] = tile::pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      p[kk][2] = tile::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p[kk][3] = tile::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };

  top(0);
  issue_s(0);
  wait<0>();
  softmax(0);
  rescale_and_pack();
  for (int i = 1; i < n_tiles; ++i) {
    top(i);
    issue_s(i);
    issue_pv(i - 1);
    wait<1>();
    softmax(i);
    wait<0>();
    fence_regs(o);
    rescale_and_pack();
  }
  top(n_tiles);
  issue_pv(n_tiles - 1);
  wait<0>();
  fence_regs(o);

  // Normalize and store rows g and g+8 of the warp's 16.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = wgi * 64 + warp * 16 + g + 8 * r;
    const float sum = tile::quad_sum(l[r]);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    if (row >= qt.rows) continue;
    TQ* dst = out + (int64_t(qt.t0 + qt.m0 + row) * qt.H + qt.h) * kD;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if constexpr (std::is_same_v<TQ, float>) {
        *reinterpret_cast<float2*>(dst + j * 8 + 2 * t4) = make_float2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
      } else {
        *reinterpret_cast<uint32_t*>(dst + j * 8 + 2 * t4) = tile::pack2<TQ>(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
      }
    }
  }
}

}  // namespace vlm::cuda::wg
