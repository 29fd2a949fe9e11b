// Decode attention split along the context (FlashDecoding) on tensor cores.
// Plan (host, from the batch's maxima, the SM count and the kernel's occupancy): a partition length
// P (a multiple of 64 keys) so that num_seqs * Hkv * splits fills the GPU in one wave; sequence s
// has ceil(context_lens[s] / P) splits. Split kernel, grid (max_splits, Hkv, num_seqs), 4 warps: the
// G = H / Hkv query heads of the group are the 16 rows of one mma tile (rows past G are zero), so
// every K/V element is loaded once per group; each warp takes 16 keys of every 64-key tile with its
// own online softmax, and the 4 warps are merged in shared memory. With one split in all the kernel
// writes the output; otherwise it writes unnormalized partials (O, max, sum) to the workspace and
// the reduce kernel (grid (num_seqs, H), D threads) merges the splits.
// With counters (paged_decode_attention's last argument) the last CTA of each (sequence, group)
// to finish merges the group's splits instead (one launch fewer per layer; reduce_group).
// SinkRouter (batch.group_skip set): the launch shape stays the dense one (capturable; it does not
// depend on the decisions), but a sequence's A active groups share its Hkv x max_splits CTAs of
// the (split, group) plane, each with floor(Hkv * max_splits / A) splits of a partition computed
// on the device from its own context length (routed_split). So the CTAs a sink group would have
// taken stream the active groups' keys instead of returning at once; a sink group's surrogate is
// written by the CTA (0, g). Routed launches always go through the workspace and the reduce.
// Three plans (DecodeKernel, cuda_attention.h; the plans: decode_plan.cuh, the workspace merges:
// decode_reduce.cuh): v1 (the default; routed launches always take it) takes partitions of at least
// 128 keys and merges with reduce_group; v2 (opt-in) takes partitions of at least 64 keys (one tile: at 1K context, one sequence, 16 splits of a
// group instead of 8, each CTA's K/V in flight at once with no second tile behind it), as few
// splits as keep the merge in the split kernel where that costs partitions of at most 256 keys,
// prefetches the block-table lines of its keys into L1 while the context length is read (the
// table entries' load then does not wait a second L2 round trip), and merges with
// reduce_group_staged (one L2 round trip for all the partials that fit shared memory, instead
// of reduce_group's serial loads). v3 (opt-in) launches v2's plan, capped at 16 splits a group,
// in thread-block clusters of the group's splits: each CTA keeps its partial in shared memory
// and the cluster merges them through distributed shared memory (decode::cluster_merge), with
// no workspace writes, fences, counters or L2 reads; an empty split (a shorter sequence of the
// batch) still takes part with m = -inf. The merges: decode_merge.cuh.
// An F8_E4M3 cache: the same kernel; K's per-head scale multiplies the softmax scale, V's the
// group's output rows. Four forms (fp8_kv_tile.cuh), VLM_CUDA_FP8_KV_KERNEL read once:
// v2 (=v2, kKvFp8Reg): f16 mma whose K/V fragments are converted in registers from swizzled
// byte tiles (E4M3 -> f16 exact), four stages of 64-key byte tiles in flight (the shared memory
// of two 16-bit stages), one barrier a tile; v1 (=v1, kKvFp8Smem, session 16's first): bf16 mma,
// each byte tile (two stages) converted into a bf16 tile in shared memory before the mma; v3 (=v3,
// kKvFp8Reg3, the default since session 17's measurement): v2's math with six stages (5 byte tiles, 80 KiB at D = 128, in flight while
// one computes: v2 keeps 3 in flight, 48 KiB, below the bf16 kernel's up to 64 KiB of its two
// stages) and each tile's block-table entries read a tile before its copies (fp8_kv_tile.cuh), so
// no dependent table load sits between a tile's barrier and its compute; its 100 KiB of shared
// memory leaves 2 CTAs an SM (v2: 3), which a 64-sequence plan (one split a group) fills anyway;
// it also skips O's rescale in a tile where no row's max moved (a warp vote). v4 (=v4, kKvFp8Reg4,
// opt-in): v3 with V's bytes turned into f16 fragments by integer ops (pv_tile_fp8_alu) while K's
// keep the hardware conversion, so the two conversions run on two pipes (measuring which bounds).
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention/attention_f32.cuh"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/decode_merge.cuh"
#include "kernels/cuda/attention/decode_plan.cuh"
#include "kernels/cuda/attention/decode_reduce.cuh"
#include "kernels/cuda/attention/fp8_kv_tile.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/pdl.cuh"

namespace vlm::cuda {
namespace {

// Q, then two stages of K and V tiles (an FP8 cache: two stages of byte tiles and one bf16 tile
// of K and V, or kFp8Stages stages of byte tiles: the same bytes; v3: kFp8Stages3 stages of byte
// tiles, 1.5x those bytes), later reused by the warps' merge.
template <int D, class T, int kKv = kKv16>
constexpr int decode_smem_bytes() {
  const int stages = fp8_deep(kKv) ? kFp8Stages3 * 2 * kBN * D : 2 * 2 * kBN * D * int(sizeof(T));
  return kRows * D * int(sizeof(T)) + std::max(stages, kWarps * kRows * (D + 2) * 4);
}

// PDL launches, before the wait: the K and V rows of head hk of the cache blocks holding keys
// [k_begin, k_end) asked of L2 (one thread per block). Safe before the wait: the block table and
// lengths are the step's metadata (uploaded before its first kernel), and L2 is coherent, so a
// line the RoPE kernel writes after its prefetch is still read fresh.
template <class T>  // T: the cache's element (uint8_t for an FP8 cache)
__device__ __forceinline__ void prefetch_kv(const KVView& kv, const int32_t* table, int hk, int k_begin, int k_end) {
  const uint32_t bytes = uint32_t(kv.head_stride * int64_t(sizeof(T)));
  for (int b = k_begin / kv.block_size + int(threadIdx.x); b <= (k_end - 1) / kv.block_size; b += kThreads) {
    const int64_t off = kv.offset(table[b], hk, 0);
    prefetch_l2(static_cast<const T*>(kv.k) + off, bytes);
    prefetch_l2(static_cast<const T*>(kv.v) + off, bytes);
  }
}
// Where a cluster CTA keeps its partial [G][D + 2] floats: after the warps' merge space.
template <int D, class T>
constexpr int kClusterPartOffset = kRows * D * int(sizeof(T)) + kWarps * kRows * (D + 2) * 4;
template <int D, class T>
constexpr bool cluster_part_fits() {
  return kClusterPartOffset<D, T> + kRows * (D + 2) * 4 <= decode_smem_bytes<D, T>();
}
static_assert(cluster_part_fits<64, __half>() && cluster_part_fits<128, __half>(), "cluster partial past smem");

template <int D, class T, class TQ, int kKv>
__global__ void __launch_bounds__(kThreads)
decode_split_kernel(const TQ* __restrict__ q, int H, KVView kv, CudaAttentionBatch batch, float scale_log2,
                    int partition, float* __restrict__ ws, TQ* __restrict__ out, int* __restrict__ counters,
                    int mode, int prefetch) {
  constexpr bool kFp8 = kKv != kKv16;
  constexpr bool kFp8Reg = kKv == kKvFp8Reg || fp8_deep(kKv);  // the register forms (v2, v3, v4)
  constexpr bool kDeep = fp8_deep(kKv);
  static_assert(!kFp8Reg || (std::is_same_v<T, __half> && kRows * D * int(sizeof(T)) +
                                                                 fp8_stages<kKv>() * 2 * kBN * D <=
                                                             decode_smem_bytes<D, T, kKv>()),
                "register forms: f16 mma, their stages in the kernel's shared memory");
  if (prefetch && batch.group_skip == nullptr) {  // dense plans: this CTA's keys (a routed plan's need the flags)
    const int ctx0 = batch.context_lens[blockIdx.z], k0 = int(blockIdx.x) * partition;
    if (k0 < ctx0)
      prefetch_kv<std::conditional_t<kFp8, uint8_t, T>>(kv, batch.block_tables + int64_t(blockIdx.z) * batch.max_blocks_per_seq, int(blockIdx.y), k0,
                     min(ctx0, k0 + partition));
  }
  pdl_wait();  // PDL (pdl.cuh): q, the new keys and the counters come from earlier kernels
  pdl_trigger();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int kSmemFloats = decode_smem_bytes<D, T, kKv>() / 4;
  T* sq = reinterpret_cast<T*>(smem_raw);
  // Stage i: K at kv_smem + i * 2 * kBN * D, V right after it (no arrays: they would live in
  // local memory when indexed by the loop counter).
  T* const kv_smem = sq + kRows * D;
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * D; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * D + kBN * D; };
  // FP8: stage i's byte tiles, then the one bf16 tile of K and of V they are converted into.
  uint8_t* const fp8_smem = reinterpret_cast<uint8_t*>(kv_smem);
  auto bk = [&](int i) { return fp8_smem + i * 2 * kBN * D; };
  auto bv = [&](int i) { return fp8_smem + i * 2 * kBN * D + kBN * D; };
  T* const ck = reinterpret_cast<T*>(fp8_smem + 4 * kBN * D);
  T* const cv = ck + kBN * D;
  int split = blockIdx.x, hk = blockIdx.y;
  const int s = blockIdx.z;
  const int ctx = batch.context_lens[s];
  if (mode != kModeV1)  // dense (routed launches take v1): this CTA's keys are known before ctx is
    decode::prefetch_table(batch.block_tables + int64_t(s) * batch.max_blocks_per_seq, batch.max_blocks_per_seq,
                   split * partition, partition, kv.block_shift, int(threadIdx.x));
  int ws_stride = gridDim.x;  // workspace slots per (sequence, head)
  int slots = gridDim.x;      // splits this CTA's group can have
  if (batch.group_skip != nullptr) {  // SinkRouter: CTA (0, g) writes sink group g's surrogate
    const int Hkv = kv.num_kv_heads, G = H / Hkv;
    if (split == 0)
      sink_group_skipped(batch.group_skip, batch.group_surrogate, s, hk, Hkv, kv.head_dim, H, hk * G, hk * G + G,
                         int(threadIdx.x), kThreads, out);
    // This CTA's place among the active groups' splits (routed_plan).
    ws_stride = gridDim.x * gridDim.y;
    const uint8_t* skip = batch.group_skip + int64_t(s) * Hkv;
    const RoutedPlan p = routed_plan(skip, Hkv, ws_stride, ctx);
    const int c = blockIdx.y * gridDim.x + blockIdx.x;
    if (p.active == 0 || c / p.per >= p.active) return;
    int a = c / p.per;
    for (hk = 0; skip[hk] != 0 || a > 0; ++hk)
      if (skip[hk] == 0) --a;
    split = c % p.per;
    partition = p.partition;
    slots = p.per;
  }
  int k_begin = split * partition;
  if (k_begin >= ctx) {
    if (mode != kModeCluster) return;
    k_begin = ctx;  // cluster: an empty split still takes part in the merge (no tile, m = -inf)
  }
  const int k_end = min(ctx, k_begin + partition);
  const int G = H / kv.num_kv_heads;
  const int32_t* table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int num_tiles = (k_end - k_begin + kBN - 1) / kBN;
  if constexpr (kFp8) scale_log2 *= kv.k_scale[hk];

  float o[1][D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int t4 = lane % 4, g = lane / 4;
  if constexpr (kFp8Reg) {
    // Stage i % kStages: K's swizzled byte tile [kBN][D], then V's. v3 reads each tile's block-table
    // entries (blk) one tile before its copies: the prologue's last step and each iteration read the
    // entries of the tile the next iteration copies.
    constexpr int kStages = fp8_stages<kKv>();
    auto stage = [&](int i) { return fp8_smem + (i % kStages) * 2 * kBN * D; };
    [[maybe_unused]] int32_t blk[tile::Fp8TileChunks<kBN, D, kThreads>::kIters];
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < num_tiles) {
        if constexpr (kDeep) {
          tile::fp8_tile_blocks<kBN, D, kThreads>(kv, table, k_begin + i * kBN, k_end, tid, blk);
          tile::load_kv_tile_fp8_blocks<kBN, D, kThreads>(kv, blk, hk, k_begin + i * kBN, k_end, stage(i),
                                                          stage(i) + kBN * D, tid);
        } else {
          tile::load_kv_tile_fp8_swz<kBN, D, kThreads>(kv, table, hk, k_begin + i * kBN, k_end, stage(i),
                                                       stage(i) + kBN * D, tid);
        }
      }
      tile::cp_async_commit();
    }
    if constexpr (kDeep)
      if (kStages - 1 < num_tiles)
        tile::fp8_tile_blocks<kBN, D, kThreads>(kv, table, k_begin + (kStages - 1) * kBN, k_end, tid, blk);
    // Q's A fragments (f16) straight from global memory, in qk_tile_fp8's order of the head
    // dimension: qf[kk][r] (row g + 8r) holds columns t4*D/4 + 4kk + {0,1}, qf[kk][2 + r] + {2,3}.
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      const TQ* src = q + (int64_t(s) * H + hk * G + min(row, G - 1)) * D + t4 * (D / 4);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        float x[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) x[e] = row < G ? to_f32(src[4 * kk + e]) : 0.f;
        qf[kk][r] = tile::pack2<__half>(x[0], x[1]);
        qf[kk][2 + r] = tile::pack2<__half>(x[2], x[3]);
      }
    }
    for (int n = 0; n < num_tiles; ++n) {
      const int key0 = k_begin + n * kBN;
      tile::cp_async_wait<kStages - 2>();  // tile n's group done (one group per tile, empty past the end)
      __syncthreads();  // ... for every thread's copies, and stage (n - 1)'s reads done before it is refilled
      const int next = n + kStages - 1;
      if (next < num_tiles) {
        if constexpr (kDeep) {
          tile::load_kv_tile_fp8_blocks<kBN, D, kThreads>(kv, blk, hk, k_begin + next * kBN, k_end, stage(next),
                                                          stage(next) + kBN * D, tid);
          if (next + 1 < num_tiles)  // the next iteration's entries, read while this tile computes
            tile::fp8_tile_blocks<kBN, D, kThreads>(kv, table, k_begin + (next + 1) * kBN, k_end, tid, blk);
        } else {
          tile::load_kv_tile_fp8_swz<kBN, D, kThreads>(kv, table, hk, k_begin + next * kBN, k_end, stage(next),
                                                       stage(next) + kBN * D, tid);
        }
      }
      tile::cp_async_commit();
      const uint8_t* tk = stage(n);
      float sc[2][4] = {};
      tile::qk_tile_fp8<D>(sc, qf, tk, warp * 16, lane);
      if (!kDeep || key0 + kBN > k_end) {  // v3: only the partition's last tile can be partial
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + warp * 16 + j * 8 + 2 * t4 + (e & 1);
            if (key >= k_end) sc[j][e] = -INFINITY;
          }
      }
      if constexpr (kDeep) {
        // v3: O rescaled only when some row's max moved in this warp (corr = 1 exactly otherwise:
        // exp2(0)), which past a context's first tiles is rare: D/2 multiplies a thread a tile saved.
        float corr[2];
        tile::online_softmax_scores<2>(sc, m, l, scale_log2, corr);
        if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) tile::rescale_rows<D>(o[0], corr);
      } else {
        tile::online_softmax<D, 2>(sc, m, l, o[0], scale_log2);
      }
      if constexpr (kKv == kKvFp8Reg4) tile::pv_tile_fp8_alu<D>(o[0], sc, tk + kBN * D, warp * 16, lane);
      else tile::pv_tile_fp8<D>(o[0], sc, tk + kBN * D, warp * 16, lane);
    }
    __syncthreads();  // the merge below reuses the stages' space
  } else {
    if constexpr (kFp8) tile::load_kv_tile_fp8<kBN, D, kThreads>(kv, table, hk, k_begin, k_end, bk(0), bv(0), tid);
    else tile::load_kv_tile<kBN, D, kThreads>(kv, table, hk, k_begin, k_end, sk(0), sv(0), tid);
    tile::cp_async_commit();
    for (int i = tid; i < kRows * D / 8; i += kThreads) {
      const int r = i / (D / 8), c = (i % (D / 8)) * 8;
      T* dst = sq + tile::swz<D>(r, c);
      const TQ* src = q + (int64_t(s) * H + hk * G + r) * D + c;
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = from_f32<T>(r < G ? to_f32(src[e]) : 0.f);
    }
    __syncthreads();
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      tile::ldmatrix_x4(qf[kk], sq + tile::swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, kk * 16 + (lane >> 4) * 8));

    for (int n = 0; n < num_tiles; ++n) {
      const int key0 = k_begin + n * kBN;
      if (n + 1 < num_tiles) {
        if constexpr (kFp8)
          tile::load_kv_tile_fp8<kBN, D, kThreads>(kv, table, hk, key0 + kBN, k_end, bk((n + 1) & 1), bv((n + 1) & 1),
                                                   tid);
        else
          tile::load_kv_tile<kBN, D, kThreads>(kv, table, hk, key0 + kBN, k_end, sk((n + 1) & 1), sv((n + 1) & 1), tid);
      }
      tile::cp_async_commit();
      tile::cp_async_wait<1>();
      __syncthreads();
      const T* tk = sk(n & 1);
      const T* tv = sv(n & 1);
      if constexpr (kFp8) {  // this stage's bytes -> the bf16 tiles (read by the previous tile's mma: synced)
        tile::convert_fp8_tile<kBN, D, kThreads>(bk(n & 1), ck, tid);
        tile::convert_fp8_tile<kBN, D, kThreads>(bv(n & 1), cv, tid);
        __syncthreads();
        tk = ck;
        tv = cv;
      }
      float sc[1][2][4] = {};
      tile::qk_tile<D, 2>(sc[0], qf, tk, warp * 16, lane);
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + warp * 16 + j * 8 + 2 * t4 + (e & 1);
          if (key >= k_end) sc[0][j][e] = -INFINITY;
        }
      tile::online_softmax<D, 2>(sc[0], m, l, o[0], scale_log2);
      tile::pv_tile<D, 2, 1>(o, sc, tv, warp * 16, lane);
      __syncthreads();
    }
  }

  // Merge the 4 warps: per warp and row its max, sum and O [kRows][D] (f32), in the K/V space.
  float* red = reinterpret_cast<float*>(sq + kRows * D);  // [kWarps][kRows][D + 2]: O, then m, l
  auto at = [&](int w, int row) { return red + (w * kRows + row) * (D + 2); };
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    const float lsum = tile::quad_sum(l[r]);
    float* dst = at(warp, row);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      if constexpr (kFp8Reg) {  // pv_tile_fp8's column order
        dst[2 * t4 * (D / 8) + n] = o[0][n][2 * r];
        dst[(2 * t4 + 1) * (D / 8) + n] = o[0][n][2 * r + 1];
      } else {
        dst[n * 8 + 2 * t4] = o[0][n][2 * r];
        dst[n * 8 + 2 * t4 + 1] = o[0][n][2 * r + 1];
      }
    }
    if (t4 == 0) {
      dst[D] = m[r];
      dst[D + 1] = lsum;
    }
  }
  __syncthreads();
  const int h0 = hk * G;
  // O is linear in V; v4's V fragments hold V's stored values times 2^-8 (pv_tile_fp8_alu).
  const float v_scale = kFp8 ? kv.v_scale[hk] * (kKv == kKvFp8Reg4 ? 256.f : 1.f) : 1.f;
  for (int i = tid; i < G * D; i += kThreads) {
    const int row = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, at(w, row)[D]);
    float acc = 0.f, lsum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = exp2f(at(w, row)[D] - mx);  // 0 for a warp that saw no key
      acc += f * at(w, row)[d];
      lsum += f * at(w, row)[D + 1];
    }
    if constexpr (kFp8) acc *= v_scale;
    const int64_t qh = int64_t(s) * H + h0 + row;
    if (mode == kModeCluster) {  // this split's partial [G][D + 2] for cluster_merge
      float* part = reinterpret_cast<float*>(smem_raw + kClusterPartOffset<D, T>) + row * (D + 2);
      const bool none = mx == -INFINITY;  // an empty split (acc and lsum are NaN)
      part[d] = none ? 0.f : acc;
      if (d == 0) {
        part[D] = mx;
        part[D + 1] = none ? 0.f : lsum;
      }
    } else if (ws == nullptr) {  // one split in all: the result
      out[qh * D + d] = from_f32<TQ>(acc / lsum);
    } else {
      // Workspace: O [S*H, max_splits, D], then (m, l) [S*H, max_splits, 2].
      ws[(qh * ws_stride + split) * D + d] = acc;
      if (d == 0) {
        float* ml = ws + int64_t(gridDim.z) * H * ws_stride * D;
        ml[(qh * ws_stride + split) * 2] = mx;
        ml[(qh * ws_stride + split) * 2 + 1] = lsum;
      }
    }
  }
  if (mode == kModeCluster) {
    __syncthreads();  // the part written (cluster_merge's barrier orders it for the other CTAs too)
    decode::cluster_merge<D, kThreads, TQ>(reinterpret_cast<const float*>(smem_raw + kClusterPartOffset<D, T>), G,
                                           int64_t(s) * H + h0, out);
    return;
  }
  if (ws == nullptr || counters == nullptr) return;  // decode_reduce_kernel merges the splits
  // Merged reduce: the group's CTAs that wrote partials (ceil(ctx / partition) of them, routed or
  // not) each take a ticket after their partials are visible device-wide; the last one merges
  // them and puts the counter back to 0 for the next launch (nothing else touches it in this one).
  __shared__ int is_last;
  __threadfence();
  __syncthreads();
  int* counter = counters + int64_t(s) * kv.num_kv_heads + hk;
  const int splits = min(slots, (ctx + partition - 1) / partition);  // the CTAs that wrote partials
  if (tid == 0) {
    is_last = atomicAdd(counter, 1) == splits - 1;
    if (is_last) *counter = 0;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const float* ml = ws + int64_t(gridDim.z) * H * ws_stride * D;
  if (mode == kModeV2)
    decode::reduce_group_staged<D, kThreads, kRows, TQ>(ws, ml, ws_stride, splits, int64_t(s) * H + h0, G,
                                                        reinterpret_cast<float*>(smem_raw), kSmemFloats, out);
  else
    reduce_group<TQ>(ws, ml, ws_stride, splits, int64_t(s) * H + h0, G, D, reinterpret_cast<float*>(smem_raw), out);
}

// Whether the split kernel launches in clusters of n CTAs (n in [2, decode::kMaxCluster]) on this
// device: sm_90+, sizes above 8 allowed (non-portable), and at least one such cluster resident
// (cudaOccupancyMaxActiveClusters); probed once per kernel for every n (after launch_decode has
// allowed its shared memory).
template <int D, class T, class TQ, int kKv>
bool cluster_launch_ok(int n) {
  static const auto ok = [] {
    auto* const kernel = decode_split_kernel<D, T, TQ, kKv>;
    constexpr int smem = decode_smem_bytes<D, T, kKv>();
    std::array<bool, decode::kMaxCluster + 1> r{};
    int dev = 0, major = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) return r;
    const bool big = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    for (int c = 2; c <= decode::kMaxCluster; ++c) {
      if (c > 8 && !big) break;
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(c, 1, 1);
      cfg.blockDim = dim3(kThreads, 1, 1);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr = {};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = c;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      r[c] = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0;
    }
    (void)cudaGetLastError();  // a refused size is an answer, not an error for the next launch
    return r;
  }();
  if (n > 8 && n <= decode::kMaxCluster && ok[n])  // the probe's attribute, on this device too (tensor parallelism)
    once_per_device(reinterpret_cast<const char*>(decode_split_kernel<D, T, TQ, kKv>) + 1, [] {  // key apart from its smem's
      (void)cudaFuncSetAttribute(decode_split_kernel<D, T, TQ, kKv>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    });
  return n >= 2 && n <= decode::kMaxCluster && ok[n];
}

template <int D, class T, class TQ, int kKv>
void launch_decode(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale,
                   void* out, void* workspace, int32_t* counters, int mode, cudaStream_t stream) {
  constexpr int smem = decode_smem_bytes<D, T, kKv>();
  const bool smem_ok = allow_dynamic_smem(decode_split_kernel<D, T, TQ, kKv>, smem);
  (void)smem_ok;
  static const int blocks_per_sm = [] {
    int n = 0;
    VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_split_kernel<D, T, TQ, kKv>, kThreads, smem));
    return std::max(1, n);
  }();
  auto* const kernel = decode_split_kernel<D, T, TQ, kKv>;
  DecodePlan plan = plan_decode(batch.num_seqs, kv.num_kv_heads, batch.max_context_len, blocks_per_sm, mode);
  if (mode == kModeCluster) {
    if (cluster_launch_ok<D, T, TQ, kKv>(plan.max_splits)) {  // one cluster per (sequence, group)
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(plan.max_splits, kv.num_kv_heads, batch.num_seqs);
      cfg.blockDim = dim3(kThreads, 1, 1);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = stream;
      cudaLaunchAttribute attr = {};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = plan.max_splits;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      VLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<const TQ*>(q), H, kv_view(kv), batch,
                                        scale * float(M_LOG2E), plan.partition, static_cast<float*>(nullptr),
                                        static_cast<TQ*>(out), static_cast<int*>(nullptr), int(kModeCluster),
                                        0));  // no PDL: a cluster launch is a plain one
      VLM_CUDA_CHECK_LAUNCH();
      return;
    }
    mode = kModeV2;  // one split, more than a cluster takes, or no cluster fits: v2
    plan = plan_decode(batch.num_seqs, kv.num_kv_heads, batch.max_context_len, blocks_per_sm, mode);
  }
  const bool v2 = mode == kModeV2;
  const bool routed = batch.group_skip != nullptr;
  VLM_CHECK(!routed || workspace != nullptr, "routed decode attention needs its workspace");
  float* ws = plan.max_splits > 1 || routed ? static_cast<float*>(workspace) : nullptr;
  const int ws_stride = routed ? plan.max_splits * kv.num_kv_heads : plan.max_splits;
  const dim3 grid(plan.max_splits, kv.num_kv_heads, batch.num_seqs);
  // The merged reduce: for plans of at most merged_reduce_max_splits() splits a group, and when its
  // weights ([G][splits] + [G] floats; v2: (m, l) [2][G][splits] + [G] floats and one split's
  // [G][D] partials) fit the kernel's shared memory.
  const int G = H / kv.num_kv_heads;
  const int merge_floats = v2 ? (2 * G * ws_stride + G + 3) / 4 * 4 + G * D : G * ws_stride + G;
  const bool merged = counters != nullptr && ws != nullptr && plan.max_splits <= merged_reduce_max_splits() &&
                      merge_floats * 4 <= smem;
  launch_pdl(decode_split_kernel<D, T, TQ, kKv>, grid, kThreads, smem, stream, static_cast<const TQ*>(q), H, kv_view(kv),
             batch, scale * float(M_LOG2E), plan.partition, ws, static_cast<TQ*>(out), merged ? counters : nullptr,
             mode, int(pdl_active()));
  if (ws == nullptr || merged) return;
  const int cols = routed ? kRoutedReduceCols : D, lanes = routed ? kRoutedReduceLanes : 1;
  launch_pdl(decode_reduce_kernel<TQ>, dim3(batch.num_seqs, H, D / cols), cols * lanes,
             (ws_stride + cols * lanes) * sizeof(float), stream, ws, H, D, ws_stride, plan.partition, batch.num_seqs,
             batch.context_lens, static_cast<TQ*>(out), batch.group_skip, H / kv.num_kv_heads, cols);
}

// The FP8 cache's decode form: 1 (v1), 2 (v2), 3 (v3, the default: 1.76x bf16 at 64 x 128K on an
// H200 against v2's 1.44x, session 17) or 4 (v4);
// VLM_CUDA_FP8_KV_KERNEL=v1|v2|v3|v4 read once; set_fp8_kv_decode_form (tests, bench) overrides it.
int& fp8_kv_form() {
  static int form = [] {
    const char* e = std::getenv("VLM_CUDA_FP8_KV_KERNEL");
    if (e != nullptr && std::strcmp(e, "v1") == 0) return 1;
    if (e != nullptr && std::strcmp(e, "v4") == 0) return 4;
    return e != nullptr && std::strcmp(e, "v2") == 0 ? 2 : 3;
  }();
  return form;
}

}  // namespace

// cuda_attention.h.
int set_fp8_kv_decode_form(int form) {
  const int old = fp8_kv_form();
  if (form >= 1 && form <= 4) fp8_kv_form() = form;
  return old;
}

size_t paged_decode_workspace_bytes(int num_seqs, int num_heads, int num_kv_heads, int head_dim,
                                    int max_context_len) {
  // The most splits any occupancy gives (plan_decode's splits grow with blocks_per_sm), times Hkv:
  // a routed sequence's splits use the whole (split, group) plane's slots.
  // Either plan (v2's partitions can be shorter).
  const int splits = std::max(plan_decode(num_seqs, num_kv_heads, max_context_len, kMaxBlocksPerSm, kModeV1).max_splits,
                              plan_decode(num_seqs, num_kv_heads, max_context_len, kMaxBlocksPerSm, kModeV2).max_splits);
  return size_t(num_seqs) * num_heads * splits * num_kv_heads * (head_dim + 2) * sizeof(float);
}

void paged_decode_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                            const CudaAttentionBatch& batch, float scale, void* out, void* workspace,
                            cudaStream_t stream, int32_t* counters, DecodeKernel kernel) {
  check_tiled_attention(kv, num_heads, "decode attention");
  VLM_CHECK(num_heads / kv.num_kv_heads <= kRows, "decode attention: group {} > {}", num_heads / kv.num_kv_heads, kRows);
  if (batch.num_seqs == 0) return;
  if (kv.dtype == DType::F32) {
    attention_f32(q, act, num_heads, kv, batch, scale, out, /*decode=*/true, stream);
    return;
  }
  const int mode = decode_mode(kernel, batch.group_skip != nullptr, batch.num_seqs);
  if (kv.dtype == DType::F8_E4M3) {
    check_fp8_cache(kv, "decode attention");
    const int form = fp8_kv_form();
    dispatch_fp8_cache(kv, act, [&](auto d, auto a) {
      if (form == 1)
        launch_decode<decltype(d)::value, __nv_bfloat16, decltype(a), kKvFp8Smem>(q, num_heads, kv, batch, scale, out,
                                                                                  workspace, counters, mode, stream);
      else if (form == 3)
        launch_decode<decltype(d)::value, __half, decltype(a), kKvFp8Reg3>(q, num_heads, kv, batch, scale, out,
                                                                           workspace, counters, mode, stream);
      else if (form == 4)
        launch_decode<decltype(d)::value, __half, decltype(a), kKvFp8Reg4>(q, num_heads, kv, batch, scale, out,
                                                                           workspace, counters, mode, stream);
      else
        launch_decode<decltype(d)::value, __half, decltype(a), kKvFp8Reg>(q, num_heads, kv, batch, scale, out,
                                                                          workspace, counters, mode, stream);
    });
    return;
  }
  dispatch_tensor_core(kv, act, [&](auto d, auto c, auto a) {
    launch_decode<decltype(d)::value, decltype(c), decltype(a), kKv16>(q, num_heads, kv, batch, scale, out, workspace,
                                                                        counters, mode, stream);
  });
}

}  // namespace vlm::cuda
