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
// The warp-specialized forms (attend_query_tile_ws below) add a producer warpgroup that does all
// the copies; with PP (the default kernel) the two consumers alternate their products in pingpong.
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

// The pieces of one key tile for one warpgroup (all its 128 threads call them, wgmma being
// warpgroup-wide). issue_s: S = Q K^T for its 64 rows (from row q_row0 of sq), not committed.
template <class T>
__device__ __forceinline__ void issue_s(float (&s)[16][4], const T* sq, int q_row0, const T* sk) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk)
    mma_ss<T>(s, desc_k_major<kBM>(sq, q_row0, kk), desc_k_major<kBN>(sk, 0, kk), kk > 0);
}

// issue_pv: O += P V (P from registers), not committed.
template <class T>
__device__ __forceinline__ void issue_pv(float (&o)[16][4], const uint32_t (&p)[8][4], const T* sv) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) mma_rs_mn<T>(o, p[kk], desc_mn_major<kBN>(sv, kk));
}

// The causal mask where the diagonal crosses the warp's rows (warp_pos: position of the warp's
// first row) on a finished S of the key tile at key0.
__device__ __forceinline__ void mask_causal(float (&s)[16][4], int key0, int warp_pos, int lane) {
  const int g = lane / 4, t4 = lane % 4;
  if (key0 + kBN - 1 > warp_pos) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + j * 8 + 2 * t4 + (e & 1);
        if (key > warp_pos + g + 8 * (e >> 1)) s[j][e] = -INFINITY;
      }
  }
}

// The K/V rows of a key tile (keys [key0, key0 + kBN) of KV head hk, zero from key_end on) into
// the SW128 tiles sk, sv by cp.async; NT threads share the copy.
template <int NT, class T>
__device__ __forceinline__ void load_kv(const KVView& kv, const int32_t* table, int hk, int key0, int key_end, T* sk,
                                        T* sv, int tid) {
  tile::load_kv_tile<kBN, kD, NT, T, Sw128Rows<kBN>, 4>(kv, table, hk, key0, key_end, sk, sv, tid);
}

// One key tile for one warpgroup, start to end: S, mask and softmax, O += P V.
template <class T>
__device__ __forceinline__ void attend_key_tile(float (&o)[16][4], float (&m)[2], float (&l)[2], const T* sq,
                                                int q_row0, const T* sk, const T* sv, int key0, int warp_pos,
                                                float scale_log2, int lane) {
  float s[16][4];
  uint32_t p[8][4];
  fence();
  issue_s<T>(s, sq, q_row0, sk);
  commit();
  wait<0>();
  fence_regs(s);
  mask_causal(s, key0, warp_pos, lane);
  tile::online_softmax<kD, 16>(s, m, l, o, scale_log2);
  pack_p<T>(s, p);
  fence_regs(o);
  fence();
  issue_pv<T>(o, p, sv);
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
    load_kv<kThreads>(kv, qt.table, qt.hk, tiles[0] * kBN, key_end, skv, skv + kTileElems, tid);
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
      load_kv<kThreads>(kv, qt.table, qt.hk, tiles[i + 1] * kBN, key_end, nk, nk + kTileElems, tid);
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

// ---- warp-specialized variants: a producer warpgroup copies, two consumer warpgroups compute ----
constexpr int kWsThreads = 384;
constexpr int kWsStages = 2;  // attend_query_tile_ws
constexpr int kPpStages = 3;  // pp_consume: a stage is held from S_i until P_i V_i, a section later
template <int STAGES>
constexpr int ws_smem_bytes() {
  return (kBM * kD + STAGES * 2 * kTileElems) * 2 + 1024 + 16 * STAGES;  // + the mbarriers
}
constexpr int kWsSmemBytes = ws_smem_bytes<kWsStages>();
constexpr int kPpSmemBytes = ws_smem_bytes<kPpStages>();  // 225 KiB: within the 227 KiB of an sm_90 CTA

// The shared-memory layout of the warp-specialized kernels and their pipeline state.
template <class T, int STAGES>
struct WsSmem {
  T* sq;           // Q tile, SW128
  T* skv;          // stage i: K at skv + 2 i kTileElems, V right after
  uint64_t* full;  // [STAGES]: the stage's copies landed (count: the 128 producer threads)
  uint64_t* empty;  // [STAGES]: both consumers are done with it (count: 256 consumer threads)
  __device__ explicit WsSmem(unsigned char* raw) {
    sq = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    skv = sq + kBM * kD;
    full = reinterpret_cast<uint64_t*>(skv + STAGES * 2 * kTileElems);
    empty = full + STAGES;
  }
  __device__ const T* k(int i) const { return skv + (i % STAGES) * 2 * kTileElems; }
  __device__ const T* v(int i) const { return k(i) + kTileElems; }
};

// The producer warpgroup (tid 0..127 of it): copies Q and the K/V tiles by cp.async through
// STAGES stages; a stage is published through full[] once its copies landed and refilled once
// empty[] says both consumers released it.
template <int STAGES, class T, class TQ, class Tiles>
__device__ __forceinline__ void ws_produce(const TQ* __restrict__ q, const KVView& kv, const QueryTile& qt,
                                           const Tiles& tiles, const WsSmem<T, STAGES>& sm, int tid) {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
  const int n_tiles = tiles.count(), key_end = qt.pos0 + qt.rows;
  load_q_tile<128>(q, qt, sm.sq, tid);
  for (int i = 0; i < n_tiles; ++i) {
    const int st = i % STAGES;
    if (i >= STAGES) mbar_wait(&sm.empty[st], ((i / STAGES) - 1) & 1);
    T* const sk = sm.skv + st * 2 * kTileElems;
    load_kv<128>(kv, qt.table, qt.hk, tiles[i] * kBN, key_end, sk, sk + kTileElems, tid);
    tile::cp_async_commit();
    if (i >= 1) {  // tile i-1 (and Q with tile 0) landed: publish it
      tile::cp_async_wait<1>();
      fence_proxy_async();
      mbar_arrive(&sm.full[(i - 1) % STAGES]);
    }
  }
  tile::cp_async_wait<0>();
  fence_proxy_async();
  if (n_tiles >= 1) mbar_arrive(&sm.full[(n_tiles - 1) % STAGES]);
}

// Sets up the barriers of a warp-specialized CTA; returns the warpgroup index (0: producer) as
// the compiler sees a warp-uniform value (wgmma must not sit in a branch it deems divergent).
template <class T, int STAGES>
__device__ __forceinline__ int ws_begin(const WsSmem<T, STAGES>& sm) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sm.full[s], 128);
      mbar_init(&sm.empty[s], 256);
    }
  }
  __syncthreads();
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
}

// The consumer side of attend_query_tile_ws without pingpong: each warpgroup takes the tiles as
// they land, S, softmax and P V in turn (attend_key_tile), no barrier between the two.
template <class T, class Tiles>
__device__ __forceinline__ void ws_consume(float (&o)[16][4], float (&m)[2], float (&l)[2],
                                           const WsSmem<T, kWsStages>& sm, const QueryTile& qt, const Tiles& tiles,
                                           int wgi, int warp, int lane, float scale_log2) {
  const int wg_pos = qt.pos0 + wgi * 64;
  for (int i = 0; i < tiles.count(); ++i) {
    const int key0 = tiles[i] * kBN;
    mbar_wait(&sm.full[i % kWsStages], (i / kWsStages) & 1);
    if (key0 <= wg_pos + 63)
      attend_key_tile<T>(o, m, l, sm.sq, wgi * 64, sm.k(i), sm.v(i), key0, wg_pos + warp * 16, scale_log2, lane);
    mbar_arrive(&sm.empty[i % kWsStages]);
  }
}

// The consumer side with the two warpgroups in "pingpong" (FlashAttention-3's schedule): each
// tile's matrix products of one warpgroup are issued as one section, P_{i-1} V_{i-1} then S_i =
// Q K_i^T, and the sections of the two warpgroups alternate through named barriers 1 and 2 (a
// warpgroup syncs on its own before issuing and arrives on the other's after), so one
// warpgroup's softmax of S_i runs while the other's products keep the tensor cores busy. Every
// tile is computed by both warpgroups (a tile past a warpgroup's rows is masked to zero weight),
// so the two run the same n + 1 sections. A stage is held from S_i to P_i V_i, one section later
// (hence kPpStages = 3). (Measured slower: S_i first, its softmax under the same warpgroup's
// P_{i-1} V_{i-1} with O rescaled after it, FlashAttention-3's intra-warpgroup overlap: RESULTS.md.)
template <class T, class Tiles>
__device__ __forceinline__ void pp_consume(float (&o)[16][4], float (&m)[2], float (&l)[2],
                                           const WsSmem<T, kPpStages>& sm, const QueryTile& qt, const Tiles& tiles,
                                           int wgi, int warp, int lane, float scale_log2) {
  const int n_tiles = tiles.count();
  if (n_tiles == 0) return;
  const int mine = 1 + wgi, other = 2 - wgi;  // named barrier ids
  const int warp_pos = qt.pos0 + wgi * 64 + warp * 16;
  float s[16][4];
  uint32_t p[8][4];
  if (wgi == 1) named_arrive(1);  // consumer 0 issues first
  for (int i = 0; i <= n_tiles; ++i) {  // section i: P_{i-1} V_{i-1} (i > 0), S_i (i < n)
    if (i < n_tiles) mbar_wait(&sm.full[i % kPpStages], (i / kPpStages) & 1);
    named_sync(mine);
    fence_regs(o);
    fence();
    if (i > 0) issue_pv<T>(o, p, sm.v(i - 1));
    if (i < n_tiles) issue_s<T>(s, sm.sq, wgi * 64, sm.k(i));
    commit();
    if (i < n_tiles || wgi == 0) named_arrive(other);  // consumer 1's last section has no successor
    wait<0>();
    fence_regs(s);
    fence_regs(o);
    if (i > 0) mbar_arrive(&sm.empty[(i - 1) % kPpStages]);
    if (i < n_tiles) {
      mask_causal(s, tiles[i] * kBN, warp_pos, lane);
      tile::online_softmax<kD, 16>(s, m, l, o, scale_log2);
      pack_p<T>(s, p);
    }
  }
}

// As attend_query_tile with kWsThreads threads and ws_smem_bytes<kWsStages or kPpStages>() of
// shared memory: warpgroup 0 produces (ws_produce), warpgroups 1 and 2 compute rows 0-63 and
// 64-127 without a CTA-wide barrier per tile (ws_consume; PP: pp_consume).
template <bool PP, class T, class TQ, class Tiles>
__device__ __forceinline__ void attend_query_tile_ws(const TQ* __restrict__ q, TQ* __restrict__ out,
                                                     const KVView& kv, const QueryTile& qt, const Tiles& tiles,
                                                     float scale_log2, unsigned char* smem_raw) {
  constexpr int kStages = PP ? kPpStages : kWsStages;
  const WsSmem<T, kStages> sm(smem_raw);
  const int wg_index = ws_begin(sm);
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  if (wg_index == 0) return ws_produce<kStages, T>(q, kv, qt, tiles, sm, tid);
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int wgi = wg_index - 1;
  float o[16][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  if constexpr (PP) pp_consume<T>(o, m, l, sm, qt, tiles, wgi, warp, lane, scale_log2);
  else ws_consume<T>(o, m, l, sm, qt, tiles, wgi, warp, lane, scale_log2);
  store_rows(out, qt, o, l, wgi * 64 + warp * 16, lane);
}

}  // namespace vlm::cuda::wg
