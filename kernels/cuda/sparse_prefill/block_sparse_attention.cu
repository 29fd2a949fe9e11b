// Block-sparse prefill attention on tensor cores (see cuda_block_sparse.h). One CTA = 4 warps =
// one 64-row query block of one (sequence, head); each warp owns 16 rows, their Q fragments in
// registers and their O accumulators. A key tile is 64 key positions named by the plan (a listed
// key block through k_order, or 64 gathered columns); the positions go to shared memory beside
// the K/V rows (cp.async, two stages), and the causal mask compares them with the rows' original
// positions, so any permutation of rows or keys keeps causality.
// An F8_E4M3 cache (kFp8) runs the same kernel with bf16 mma, as prefill_attention.cu does: each
// tile's E4M3 rows are copied as bytes (16-byte chunks) and converted to bf16 in shared memory
// (fp8_kv_tile.cuh: exact); K's per-head scale multiplies the softmax scale, V's the output rows.
// The 16-bit instantiations (kFp8 false) compile to the code they did before.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/fp8_kv_tile.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/sparse_prefill/block_sparse_sm90.h"
#include "kernels/cuda/sparse_prefill/block_sparse_tiles.cuh"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda {
namespace {

using sparse::kBM;  // query rows per CTA: 16 per warp
using sparse::kBN;
using sparse::kNoKey;
using sparse::TileList;
constexpr int kWarps = kBM / 16;
constexpr int kThreads = 32 * kWarps;
bool g_row_offsets = true;  // set_block_sparse_row_offsets

// Q, two stages of K and V, the tiles' key positions (FP8: the K/V bytes hold two stages of byte
// tiles, then one bf16 tile of K and V: the same bytes).
template <int D, class T>
constexpr int sparse_smem_bytes() {
  return (kBM * D + 2 * 2 * kBN * D) * int(sizeof(T)) + 2 * kBN * int(sizeof(int));
}

// K/V rows of tile t -> swizzled sk, sv [kBN][D]; positions -> kpos[kBN] (kNoKey for empty slots,
// whose rows are zero-filled). kRowOffsets: the first kBN threads look each row up once into
// roff[kBN] -- `pos`, thread tid's row position tl.position(t, tid), resolved by the caller an
// iteration early (its plan-order loads in flight during the previous tile's math), then the
// block table -- and a barrier publishes them before the copies; else every 16-byte chunk
// repeats its row's lookup (the first version; kept for the bench's side-by-side).
template <int D, bool kRowOffsets, class T>
__device__ __forceinline__ void load_tile(const KVView& kv, const int32_t* table, int hk, const TileList& tl, int t,
                                          T* sk, T* sv, int* kpos, int64_t* roff, int tid, int pos) {
  constexpr int kChunks = D / 8;
  const T* kbase = static_cast<const T*>(kv.k);
  const T* vbase = static_cast<const T*>(kv.v);
  if constexpr (kRowOffsets) {
    if (tid < kBN) {
      kpos[tid] = pos >= 0 ? pos : kNoKey;
      roff[tid] = pos >= 0 ? kv.token_offset(table, hk, pos) : -1;
    }
    __syncthreads();
  }
#pragma unroll 2
  for (int i = tid; i < kBN * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    int64_t off = 0;
    int bytes = 0;
    if constexpr (kRowOffsets) {
      const int64_t o = roff[r];
      if (o >= 0) off = o + c * 8, bytes = 16;
    } else {
      const int p = tl.position(t, r);
      if (c == 0) kpos[r] = p >= 0 ? p : kNoKey;
      if (p >= 0) {
        off = kv.token_offset(table, hk, p) + c * 8;
        bytes = 16;
      }
    }
    const int s = tile::swz<D>(r, c * 8);
    tile::cp_async16(sk + s, kbase + off, bytes);
    tile::cp_async16(sv + s, vbase + off, bytes);
  }
}

// load_tile for an F8_E4M3 cache: the tile's rows as bytes into bk, bv [kBN][D] (row-major, no
// swizzle; convert_fp8_tile makes the bf16 tiles), 16-byte chunks of 16 elements; the same row
// lookups and positions as load_tile.
template <int D, bool kRowOffsets>
__device__ __forceinline__ void load_tile_fp8(const KVView& kv, const int32_t* table, int hk, const TileList& tl, int t,
                                              uint8_t* bk, uint8_t* bv, int* kpos, int64_t* roff, int tid, int pos) {
  constexpr int kChunks = D / 16;
  const uint8_t* kbase = static_cast<const uint8_t*>(kv.k);
  const uint8_t* vbase = static_cast<const uint8_t*>(kv.v);
  if constexpr (kRowOffsets) {
    if (tid < kBN) {
      kpos[tid] = pos >= 0 ? pos : kNoKey;
      roff[tid] = pos >= 0 ? kv.token_offset(table, hk, pos) : -1;
    }
    __syncthreads();
  }
#pragma unroll 2
  for (int i = tid; i < kBN * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    int64_t off = 0;
    int bytes = 0;
    if constexpr (kRowOffsets) {
      const int64_t o = roff[r];
      if (o >= 0) off = o + c * 16, bytes = 16;
    } else {
      const int p = tl.position(t, r);
      if (c == 0) kpos[r] = p >= 0 ? p : kNoKey;
      if (p >= 0) {
        off = kv.token_offset(table, hk, p) + c * 16;
        bytes = 16;
      }
    }
    tile::cp_async16(bk + r * D + c * 16, kbase + off, bytes);
    tile::cp_async16(bv + r * D + c * 16, vbase + off, bytes);
  }
}

// Piece `piece` of `npieces` of work item `it` (see block_sparse_kernel).
template <int D, bool kRowOffsets, class T, class TQ, bool kFp8>
__device__ __forceinline__ void run_piece(const TQ* __restrict__ q, int H, const KVView& kv,
                                          const int32_t* __restrict__ block_tables, int max_blocks_per_seq,
                                          const SparsePlanView& plan, float scale_log2, TQ* __restrict__ out, int it,
                                          int piece, int npieces) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* const kv_smem = sq + kBM * D;
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * D; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * D + kBN * D; };
  int* const kpos_smem = reinterpret_cast<int*>(kv_smem + 4 * kBN * D);  // [2][kBN]
  uint8_t* const fp8_smem = reinterpret_cast<uint8_t*>(kv_smem);  // FP8: byte stages, then bf16 K, V
  auto bk = [&](int i) { return fp8_smem + i * 2 * kBN * D; };
  auto bv = [&](int i) { return fp8_smem + i * 2 * kBN * D + kBN * D; };
  T* const ck = reinterpret_cast<T*>(fp8_smem + 4 * kBN * D);
  T* const cv = ck + kBN * D;
  __shared__ int row_idx[kBM];  // chunk row of each CTA row (-1: past q_len)
  __shared__ int cta_maxpos;
  __shared__ int64_t row_off[2][kBN];  // kRowOffsets: the tile's rows in the cache

  const int32_t* item = plan.items + 4 * int64_t(it);
  const int s = item[0], h = item[1], qb = item[2];
  const SparseHeadDesc hd = plan.descs[item[3]];
  const int32_t* data = plan.data;
  const int off = hd.num_keys - hd.q_len;
  const int i0 = qb * kBM;
  const int hk = h / (H / kv.num_kv_heads);
  const int32_t* table = block_tables + int64_t(s) * max_blocks_per_seq;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  if constexpr (kFp8) scale_log2 *= kv.k_scale[hk];

  if (tid == 0) cta_maxpos = -1;
  __syncthreads();
  if (tid < kBM) {
    const int i = i0 + tid;
    const int r = sparse::item_row(data, hd, i);
    row_idx[tid] = r;
    if (r >= 0) atomicMax(&cta_maxpos, off + r);
  }
  __syncthreads();

  const TileList tl = sparse::tile_list(data, hd, qb, cta_maxpos);
  const int num_tiles = tl.count();
  const int t_begin = int(int64_t(piece) * num_tiles / npieces), t_end = int(int64_t(piece + 1) * num_tiles / npieces);

  // Row positions one tile ahead of the copies (kRowOffsets; threads tid < kBN).
  auto row_pos = [&](int t) { return kRowOffsets && tid < kBN && t < t_end ? tl.position(t, tid) : -1; };
  if (t_end > t_begin) {
    if constexpr (kFp8)
      load_tile_fp8<D, kRowOffsets>(kv, table, hk, tl, t_begin, bk(0), bv(0), kpos_smem, row_off[0], tid,
                                    row_pos(t_begin));
    else
      load_tile<D, kRowOffsets>(kv, table, hk, tl, t_begin, sk(0), sv(0), kpos_smem, row_off[0], tid,
                                row_pos(t_begin));
  }
  tile::cp_async_commit();
  int pos_next = row_pos(t_begin + 1);

  // Q rows (through q_order) -> shared, converted to T; rows past q_len are zero.
  for (int i = tid; i < kBM * D / 8; i += kThreads) {
    const int rr = i / (D / 8), c = (i % (D / 8)) * 8;
    const int r = row_idx[rr];
    T* dst = sq + tile::swz<D>(rr, c);
    const TQ* src = q + (int64_t(hd.t0 + (r >= 0 ? r : 0)) * H + h) * D + c;
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = from_f32<T>(r >= 0 ? to_f32(src[e]) : 0.f);
  }
  // Original positions of this thread's rows g and g + 8 (-1: none; sees no key).
  int rpos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int ri = row_idx[warp * 16 + g + 8 * r];
    rpos[r] = ri >= 0 ? off + ri : -1;
  }
  int warp_max = max(rpos[0], rpos[1]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, o));

  float o[1][D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  uint32_t qf[D / 16][4];

  for (int n = t_begin; n < t_end; ++n) {
    const int st = (n - t_begin) & 1;
    if (n + 1 < t_end) {
      if constexpr (kFp8)
        load_tile_fp8<D, kRowOffsets>(kv, table, hk, tl, n + 1, bk(st ^ 1), bv(st ^ 1), kpos_smem + (st ^ 1) * kBN,
                                      row_off[st ^ 1], tid, pos_next);
      else
        load_tile<D, kRowOffsets>(kv, table, hk, tl, n + 1, sk(st ^ 1), sv(st ^ 1), kpos_smem + (st ^ 1) * kBN,
                                  row_off[st ^ 1], tid, pos_next);
    }
    tile::cp_async_commit();
    pos_next = row_pos(n + 2);  // consumed next iteration: its loads overlap this tile's math
    tile::cp_async_wait<1>();
    __syncthreads();  // also publishes the Q tile on the first pass
    if (n == t_begin) {
#pragma unroll
      for (int k = 0; k < D / 16; ++k)
        tile::ldmatrix_x4(qf[k], sq + tile::swz<D>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                  k * 16 + (lane >> 4) * 8));
    }
    if constexpr (kFp8) {  // this stage's bytes -> the bf16 tiles (the previous tile's mma is done: synced)
      tile::convert_fp8_tile<kBN, D, kThreads>(bk(st), ck, tid);
      tile::convert_fp8_tile<kBN, D, kThreads>(bv(st), cv, tid);
      __syncthreads();
    }
    if (warp_max >= 0) {
      const int* kp = kpos_smem + st * kBN;
      float sc[1][kBN / 8][4] = {};
      tile::qk_tile<D, kBN / 8>(sc[0], qf, kFp8 ? ck : sk(st), 0, lane);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int2 kk = *reinterpret_cast<const int2*>(kp + j * 8 + 2 * t4);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if ((e & 1 ? kk.y : kk.x) > rpos[e >> 1]) sc[0][j][e] = -INFINITY;
      }
      tile::online_softmax<D, kBN / 8>(sc[0], m, l, o[0], scale_log2);
      tile::pv_tile<D, kBN / 8, 1>(o, sc, kFp8 ? cv : sv(st), 0, lane);
    }
    __syncthreads();
  }

  if constexpr (kFp8) {  // O is linear in V: its scale once, on the unnormalized rows (and the pieces')
    const float vs = kv.v_scale[hk];
#pragma unroll
    for (int c = 0; c < D / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][c][e] *= vs;
  }
  sparse::store_item_rows<D, TQ>(plan, {it, piece, npieces}, o[0], m, l, warp * 16, row_idx, hd.t0, H, h, out,
                                 lane);
}

// One CTA per piece (plan.queue nullptr: piece blockIdx.x), or a resident grid whose CTAs take
// the next piece from plan.queue until none is left. Pieces are numbered in cost order
// (piece_off: the exclusive sums of the items' piece counts; nullptr: one piece per item).
template <int D, bool kRowOffsets, class T, class TQ, bool kFp8>
__global__ void __launch_bounds__(kThreads)
block_sparse_kernel(const TQ* __restrict__ q, int H, KVView kv, const int32_t* __restrict__ block_tables,
                    int max_blocks_per_seq, SparsePlanView plan, float scale_log2, TQ* __restrict__ out) {
  __shared__ int next;
  const int total = sparse::total_pieces(plan);
  int p = blockIdx.x;
  if (plan.queue) {
    if (threadIdx.x == 0) next = atomicAdd(plan.queue, 1);
    __syncthreads();
    p = next;
  }
  while (p < total) {
    const sparse::PieceRef pr = sparse::find_piece(plan, p);
    run_piece<D, kRowOffsets, T, TQ, kFp8>(q, H, kv, block_tables, max_blocks_per_seq, plan, scale_log2, out, pr.it,
                                     pr.piece, pr.npieces);
    if (!plan.queue) break;
    __syncthreads();  // the piece's shared state is read; `next` too
    if (threadIdx.x == 0) next = atomicAdd(plan.queue, 1);
    __syncthreads();
    p = next;
  }
}

template <int D, class T, class TQ, bool kFp8 = false>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, const SparsePlanView& plan,
            float scale, void* out, cudaStream_t stream) {
  constexpr int smem = sparse_smem_bytes<D, T>();
  const bool smem_ok = allow_dynamic_smem(block_sparse_kernel<D, true, T, TQ, kFp8>, smem) &&
                              allow_dynamic_smem(block_sparse_kernel<D, false, T, TQ, kFp8>, smem);
  (void)smem_ok;
  auto kernel = g_row_offsets ? block_sparse_kernel<D, true, T, TQ, kFp8> : block_sparse_kernel<D, false, T, TQ, kFp8>;
  static const int resident = sparse::resident_ctas(block_sparse_kernel<D, true, T, TQ, kFp8>, kThreads, smem);
  const int ctas = sparse::launch_ctas(plan, resident, stream);
  kernel<<<ctas, kThreads, smem, stream>>>(static_cast<const TQ*>(q), H, kv_view(kv), batch.block_tables,
                                           batch.max_blocks_per_seq, plan, scale * float(M_LOG2E),
                                           static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
  sparse::combine_pieces<D>(H, plan, static_cast<TQ*>(out), stream);
}

}  // namespace

void set_block_sparse_row_offsets(bool on) { g_row_offsets = on; }

void launch_block_sparse_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                                   const CudaAttentionBatch& batch, const SparsePlanView& view, float scale, void* out,
                                   cudaStream_t stream) {
  if (kv.dtype == DType::F8_E4M3) {  // the mma.sync kernel (the sm_90a one reads 16-bit caches)
    check_fp8_cache(kv, "block-sparse attention");
    dispatch_fp8_cache(kv, act, [&](auto d, auto a) {
      launch<decltype(d)::value, __nv_bfloat16, decltype(a), true>(q, num_heads, kv, batch, view, scale, out, stream);
    });
    return;
  }
  if (block_sparse_kernel_for(kv) == BlockSparseKernel::kWgmma) {
    launch_block_sparse_sm90(q, act, num_heads, kv, batch, view, scale, out, stream);
    return;
  }
  dispatch_tensor_core(kv, act, [&](auto d, auto c, auto a) {
    launch<decltype(d)::value, decltype(c), decltype(a)>(q, num_heads, kv, batch, view, scale, out, stream);
  });
}

}  // namespace vlm::cuda
