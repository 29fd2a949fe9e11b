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

// Q tile -> the SW128 tile sq (rows past the query tile are zero); threads [0, NT) share it (cp.async
// when TQ is the cache's type, else converted through registers: the caller fences and syncs).
template <int NT, class T, class TQ>
__device__ __forceinline__ void load_q_tile(const TQ* __restrict__ q, const QueryTile& qt, T* sq, int tid) {
  for (int i = tid; i < kBM * 16; i += NT) {
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
}

// One key tile for one warpgroup (all its 128 threads call it, wgmma being warpgroup-wide): S =
// Q K^T for its 64 rows (from row q_row0 of sq), the causal mask where the diagonal crosses a
// warp's rows (warp_pos: position of the warp's first row), online softmax, O += P V.
template <class T>
__device__ __forceinline__ void attend_key_tile(float (&o)[16][4], float (&m)[2], float (&l)[2], const T* sq,
                                                int q_row0, const T* sk, const T* sv, int key0, int warp_pos,
                                                float scale_log2, int lane) {
  const int g = lane / 4, t4 = lane % 4;
  float s[16][4];
  fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk)
    mma_ss<T>(s, desc_k_major<kBM>(sq, q_row0, kk), desc_k_major<kBN>(sk, 0, kk), kk > 0);
  commit();
  wait<0>();
  fence_regs(s);
  if (key0 + kBN - 1 > warp_pos) {  // the causal diagonal crosses the warp's rows
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + j * 8 + 2 * t4 + (e & 1);
        if (key > warp_pos + g + 8 * (e >> 1)) s[j][e] = -INFINITY;
      }
  }
  tile::online_softmax<kD, 16>(s, m, l, o, scale_log2);
  uint32_t p[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    p[kk][0] = tile::pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = tile::pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = tile::pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = tile::pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
  fence_regs(o);
  fence();
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) mma_rs_mn<T>(o, p[kk], desc_mn_major<kBN>(sv, kk));
  commit();
  wait<0>();
  fence_regs(o);
}

// Normalizes and stores rows g and g+8 of one warp's 16 (row0: the warp's first row in the tile).
template <class TQ>
__device__ __forceinline__ void store_rows(TQ* __restrict__ out, const QueryTile& qt, const float (&o)[16][4],
                                           const float (&l)[2], int row0, int lane) {
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r;
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

// Attends the query tile to the key tiles `tiles` and writes its rows of out (normalized).
// q, out [T, H, 128] (TQ); the cache's element type T (bf16/f16). smem: kSmemBytes of dynamic
// shared memory. All kThreads threads call it; every thread loads, both warpgroups compute, one
// tile's copy in flight during the previous tile's math (two stages, a CTA barrier per tile).
template <class T, class TQ, class Tiles>
__device__ __forceinline__ void attend_query_tile(const TQ* __restrict__ q, TQ* __restrict__ out, const KVView& kv,
                                                  const QueryTile& qt, const Tiles& tiles, float scale_log2,
                                                  unsigned char* smem_raw) {
  // 1024-byte aligned base (the swizzle pattern repeats every 1024 bytes).
  T* const sq = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  T* const skv = sq + kBM * kD;  // stage i: K at skv + 2 i kTileElems, V right after
  const int tid = threadIdx.x, wgi = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int n_tiles = tiles.count();
  const int key_end = qt.pos0 + qt.rows;  // keys [0, key_end) are visible to some row

  load_q_tile<kThreads>(q, qt, sq, tid);
  if (n_tiles > 0)
    load_kv_tile<kBN, kThreads>(kv, qt.table, qt.hk, tiles[0] * kBN, key_end, skv, skv + kTileElems, tid);
  tile::cp_async_commit();

  float o[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int wg_pos = qt.pos0 + wgi * 64;  // position of the warpgroup's first row

  for (int i = 0; i < n_tiles; ++i) {
    const int key0 = tiles[i] * kBN;
    T* const sk = skv + (i & 1) * 2 * kTileElems;
    if (i + 1 < n_tiles) {
      T* const nk = skv + ((i + 1) & 1) * 2 * kTileElems;
      load_kv_tile<kBN, kThreads>(kv, qt.table, qt.hk, tiles[i + 1] * kBN, key_end, nk, nk + kTileElems, tid);
    }
    tile::cp_async_commit();
    tile::cp_async_wait<1>();
    fence_proxy_async();
    __syncthreads();  // this tile (and on the first pass Q) is in shared memory
    if (key0 <= wg_pos + 63)  // uniform over the warpgroup: some row of it sees this tile
      attend_key_tile<T>(o, m, l, sq, wgi * 64, sk, sk + kTileElems, key0, wg_pos + warp * 16, scale_log2, lane);
    __syncthreads();  // every warp is done with this stage before the next copy overwrites it
  }
  tile::cp_async_wait<0>();
  store_rows(out, qt, o, l, wgi * 64 + warp * 16, lane);
}

// ---- warp-specialized variant: a producer warpgroup copies, two consumer warpgroups compute ----
constexpr int kWsThreads = 384;
constexpr int kWsStages = 2;
constexpr int kWsSmemBytes = (kBM * kD + kWsStages * 2 * kTileElems) * 2 + 1024 + 64;  // + barriers

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tile::smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(tile::smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(tile::smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// As attend_query_tile with kWsThreads threads and kWsSmemBytes of shared memory: warpgroup 0
// copies Q and the K/V tiles (cp.async, kWsStages stages; a stage is published through an
// mbarrier once its copies landed, and refilled once both consumers released it), warpgroups 1
// and 2 compute rows 0-63 and 64-127 without a CTA-wide barrier per tile, so the two drift apart
// and one's softmax overlaps the other's matrix products.
template <class T, class TQ, class Tiles>
__device__ __forceinline__ void attend_query_tile_ws(const TQ* __restrict__ q, TQ* __restrict__ out,
                                                     const KVView& kv, const QueryTile& qt, const Tiles& tiles,
                                                     float scale_log2, unsigned char* smem_raw) {
  T* const sq = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  T* const skv = sq + kBM * kD;  // stage i: K at skv + 2 i kTileElems, V right after
  uint64_t* const full = reinterpret_cast<uint64_t*>(skv + kWsStages * 2 * kTileElems);
  uint64_t* const empty = full + kWsStages;
  // The warpgroup index as the compiler sees a warp-uniform value (wgmma must not sit in a
  // branch it deems divergent).
  const int wg_index = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const int n_tiles = tiles.count();
  const int key_end = qt.pos0 + qt.rows;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWsStages; ++s) {
      mbar_init(&full[s], 128);   // every producer thread, once its copies landed
      mbar_init(&empty[s], 256);  // every consumer thread, once its warpgroup is done with it
    }
  }
  __syncthreads();
  if (wg_index == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    load_q_tile<128>(q, qt, sq, tid);
    for (int i = 0; i < n_tiles; ++i) {
      const int st = i % kWsStages;
      if (i >= kWsStages) mbar_wait(&empty[st], ((i / kWsStages) - 1) & 1);
      T* const sk = skv + st * 2 * kTileElems;
      load_kv_tile<kBN, 128>(kv, qt.table, qt.hk, tiles[i] * kBN, key_end, sk, sk + kTileElems, tid);
      tile::cp_async_commit();
      if (i >= 1) {  // tile i-1 (and Q with tile 0) landed: publish it
        tile::cp_async_wait<1>();
        fence_proxy_async();
        mbar_arrive(&full[(i - 1) % kWsStages]);
      }
    }
    tile::cp_async_wait<0>();
    fence_proxy_async();
    if (n_tiles >= 1) mbar_arrive(&full[(n_tiles - 1) % kWsStages]);
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
    const int wgi = wg_index - 1;
    float o[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int wg_pos = qt.pos0 + wgi * 64;
    for (int i = 0; i < n_tiles; ++i) {
      const int st = i % kWsStages;
      const int key0 = tiles[i] * kBN;
      mbar_wait(&full[st], (i / kWsStages) & 1);
      const T* sk = skv + st * 2 * kTileElems;
      if (key0 <= wg_pos + 63)
        attend_key_tile<T>(o, m, l, sq, wgi * 64, sk, sk + kTileElems, key0, wg_pos + warp * 16, scale_log2, lane);
      mbar_arrive(&empty[st]);
    }
    store_rows(out, qt, o, l, wgi * 64 + warp * 16, lane);
  }
}

}  // namespace vlm::cuda::wg
