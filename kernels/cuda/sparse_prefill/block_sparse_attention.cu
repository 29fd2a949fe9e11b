// Block-sparse prefill attention on tensor cores (see cuda_block_sparse.h). One CTA = 4 warps =
// one 64-row query block of one (sequence, head); each warp owns 16 rows, their Q fragments in
// registers and their O accumulators. A key tile is 64 key positions named by the plan (a listed
// key block through k_order, or 64 gathered columns); the positions go to shared memory beside
// the K/V rows (cp.async, two stages), and the causal mask compares them with the rows' original
// positions, so any permutation of rows or keys keeps causality.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"
#include "kernels/cuda/attention/mma_tile.cuh"

namespace vlm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kBM = 16 * kWarps;  // query rows per CTA (the plan's block_m)
constexpr int kBN = 64;           // keys per tile (the plan's block_n)
constexpr int kThreads = 32 * kWarps;
constexpr int kNoKey = INT_MAX;   // position of an empty tile slot: masked for every row
bool g_row_offsets = true;        // set_block_sparse_row_offsets

template <int D, class T>
constexpr int sparse_smem_bytes() {
  return (kBM * D + 2 * 2 * kBN * D) * int(sizeof(T)) + 2 * kBN * int(sizeof(int));
}

// The key tiles of one work item: its listed key blocks, then its gathered columns 64 at a time.
// An item listing every aligned key block (a horizontal line's query block: every key; blocks
// are disjoint) takes its tiles
// in position order instead (`every`: tile t = keys [64 t, 64 t + 64)): the same keys, so the
// same attention up to the summation order, but read in the order every such item of the KV
// head reads them whatever its head's key permutation -- the heads sharing a KV head, whose
// items run side by side (equal cost, adjacent in the schedule), then share the tiles in L2 --
// and contiguous in the cache.
struct TileList {
  const int32_t* blocks;  // key block starts k0 (in k_order order)
  const int32_t* korder;  // nullptr: identity
  const int32_t* cols;    // gathered key positions
  int nb, nc, num_keys, maxpos;
  bool every;
  __device__ int count() const { return nb + (nc + kBN - 1) / kBN; }
  // Position of slot r of tile t, or -1 (past the keys, or invisible to every row of the CTA).
  __device__ int position(int t, int r) const {
    int p;
    if (every) {
      p = t * kBN + r;
      if (p >= num_keys) return -1;
    } else if (t < nb) {
      const int i = blocks[t] + r;
      if (i >= num_keys) return -1;
      p = korder ? korder[i] : i;
    } else {
      const int c = (t - nb) * kBN + r;
      if (c >= nc) return -1;
      p = cols[c];
    }
    return p <= maxpos ? p : -1;
  }
};

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

// Piece `piece` of `npieces` of work item `it` (see block_sparse_kernel).
template <int D, bool kRowOffsets, class T, class TQ>
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

  if (tid == 0) cta_maxpos = -1;
  __syncthreads();
  if (tid < kBM) {
    const int i = i0 + tid;
    const int r = i < hd.q_len ? (hd.q_order >= 0 ? data[hd.q_order + i] : i) : -1;
    row_idx[tid] = r;
    if (r >= 0) atomicMax(&cta_maxpos, off + r);
  }
  __syncthreads();

  const int32_t* bptr = data + hd.block_ptr;
  const int32_t* cptr = data + hd.col_ptr;
  TileList tl;
  tl.blocks = data + hd.blocks + bptr[qb];
  tl.korder = hd.k_order >= 0 ? data + hd.k_order : nullptr;
  tl.cols = data + hd.cols + cptr[qb];
  tl.nb = bptr[qb + 1] - bptr[qb];
  tl.nc = cptr[qb + 1] - cptr[qb];
  tl.num_keys = hd.num_keys;
  tl.maxpos = cta_maxpos;
  tl.every = (hd.flags & kHeadAlignedBlocks) && tl.nc == 0 && tl.nb == (hd.num_keys + kBN - 1) / kBN;
  const int num_tiles = tl.count();
  const int t_begin = int(int64_t(piece) * num_tiles / npieces), t_end = int(int64_t(piece + 1) * num_tiles / npieces);

  // Row positions one tile ahead of the copies (kRowOffsets; threads tid < kBN).
  auto row_pos = [&](int t) { return kRowOffsets && tid < kBN && t < t_end ? tl.position(t, tid) : -1; };
  if (t_end > t_begin)
    load_tile<D, kRowOffsets>(kv, table, hk, tl, t_begin, sk(0), sv(0), kpos_smem, row_off[0], tid,
                              row_pos(t_begin));
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
    if (n + 1 < t_end)
      load_tile<D, kRowOffsets>(kv, table, hk, tl, n + 1, sk(st ^ 1), sv(st ^ 1), kpos_smem + (st ^ 1) * kBN,
                                row_off[st ^ 1], tid, pos_next);
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
    if (warp_max >= 0) {
      const int* kp = kpos_smem + st * kBN;
      float sc[1][kBN / 8][4] = {};
      tile::qk_tile<D, kBN / 8>(sc[0], qf, sk(st), 0, lane);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int2 kk = *reinterpret_cast<const int2*>(kp + j * 8 + 2 * t4);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if ((e & 1 ? kk.y : kk.x) > rpos[e >> 1]) sc[0][j][e] = -INFINITY;
      }
      tile::online_softmax<D, kBN / 8>(sc[0], m, l, o[0], scale_log2);
      tile::pv_tile<D, kBN / 8, 1>(o, sc, sv(st), 0, lane);
    }
    __syncthreads();
  }

  if (npieces > 1) {
    // A piece: its unnormalized O and the rows' (m, l) to its slot; the combine kernel merges.
    float* slot = plan.partial + (int64_t(plan.slot_off[it]) + piece) * kSplitSlotFloats;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = tile::quad_sum(l[r]);
      const int row = warp * 16 + g + 8 * r;
      float* dst = slot + row * 128;
#pragma unroll
      for (int c = 0; c < D / 8; ++c)
        *reinterpret_cast<float2*>(dst + c * 8 + 2 * t4) = make_float2(o[0][c][2 * r], o[0][c][2 * r + 1]);
      if (t4 == 0) *reinterpret_cast<float2*>(slot + 64 * 128 + 2 * row) = make_float2(m[r], sum);
    }
    return;
  }
  // Normalize and store rows g and g + 8 of the warp (a row with no key: zeros).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = tile::quad_sum(l[r]);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int ri = row_idx[warp * 16 + g + 8 * r];
    if (ri < 0) continue;
    TQ* dst = out + (int64_t(hd.t0 + ri) * H + h) * D;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      dst[c * 8 + 2 * t4] = from_f32<TQ>(o[0][c][2 * r] * inv);
      dst[c * 8 + 2 * t4 + 1] = from_f32<TQ>(o[0][c][2 * r + 1] * inv);
    }
  }
}

// One CTA per piece (plan.queue nullptr: piece blockIdx.x), or a resident grid whose CTAs take
// the next piece from plan.queue until none is left. Pieces are numbered in cost order
// (piece_off: the exclusive sums of the items' piece counts; nullptr: one piece per item).
template <int D, bool kRowOffsets, class T, class TQ>
__global__ void __launch_bounds__(kThreads)
block_sparse_kernel(const TQ* __restrict__ q, int H, KVView kv, const int32_t* __restrict__ block_tables,
                    int max_blocks_per_seq, SparsePlanView plan, float scale_log2, TQ* __restrict__ out) {
  __shared__ int next;
  const int total = plan.piece_off ? plan.piece_off[plan.num_items] : plan.num_items;
  int p = blockIdx.x;
  if (plan.queue) {
    if (threadIdx.x == 0) next = atomicAdd(plan.queue, 1);
    __syncthreads();
    p = next;
  }
  while (p < total) {
    // The work item and, split, which piece of it this is.
    int it = p, piece = 0, npieces = 1;
    if (plan.piece_off) {
      int lo = 0, hi = plan.num_items - 1;  // the last item whose pieces start at or before p
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (plan.piece_off[mid] <= p) lo = mid;
        else hi = mid - 1;
      }
      it = lo, piece = p - plan.piece_off[lo], npieces = plan.piece_off[lo + 1] - plan.piece_off[lo];
    }
    run_piece<D, kRowOffsets, T, TQ>(q, H, kv, block_tables, max_blocks_per_seq, plan, scale_log2, out, it, piece,
                                     npieces);
    if (!plan.queue) break;
    __syncthreads();  // the piece's shared state is read; `next` too
    if (threadIdx.x == 0) next = atomicAdd(plan.queue, 1);
    __syncthreads();
    p = next;
  }
}

// One CTA per work item; items of more than one piece merge their pieces' partials (log-sum-exp
// over the rows' maxima m, in the log2 domain of online_softmax) into the output rows.
template <int D, class TQ>
__global__ void __launch_bounds__(kThreads) combine_kernel(int H, SparsePlanView plan, TQ* __restrict__ out) {
  const int it = blockIdx.x;
  const int np = plan.piece_off[it + 1] - plan.piece_off[it];
  if (np <= 1) return;
  const float* slots = plan.partial + int64_t(plan.slot_off[it]) * kSplitSlotFloats;
  const int32_t* item = plan.items + 4 * int64_t(it);
  const int h = item[1], qb = item[2];
  const SparseHeadDesc hd = plan.descs[item[3]];
  __shared__ float row_max[kBM], row_inv[kBM];
  __shared__ int row_idx[kBM];
  const int tid = threadIdx.x;
  if (tid < kBM) {
    const int i = qb * kBM + tid;
    row_idx[tid] = i < hd.q_len ? (hd.q_order >= 0 ? plan.data[hd.q_order + i] : i) : -1;
    float mx = -INFINITY;
    for (int k = 0; k < np; ++k) mx = fmaxf(mx, slots[k * kSplitSlotFloats + 64 * 128 + 2 * tid]);
    float sum = 0.f;
    if (mx != -INFINITY)
      for (int k = 0; k < np; ++k) {
        const float* ml = slots + k * kSplitSlotFloats + 64 * 128 + 2 * tid;
        if (ml[0] != -INFINITY) sum += ml[1] * exp2f(ml[0] - mx);
      }
    row_max[tid] = mx;
    row_inv[tid] = sum > 0.f ? 1.f / sum : 0.f;
  }
  __syncthreads();
  for (int e = tid; e < kBM * D; e += kThreads) {
    const int row = e / D, c = e % D, ri = row_idx[row];
    if (ri < 0) continue;
    const float mx = row_max[row];
    float acc = 0.f;
    if (mx != -INFINITY)
      for (int k = 0; k < np; ++k) {
        const float* sl = slots + k * kSplitSlotFloats;
        const float mk = sl[64 * 128 + 2 * row];
        if (mk != -INFINITY) acc += sl[row * 128 + c] * exp2f(mk - mx);
      }
    out[(int64_t(hd.t0 + ri) * H + h) * D + c] = from_f32<TQ>(acc * row_inv[row]);
  }
}

template <int D, class T, class TQ>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, const SparsePlanView& plan,
            float scale, void* out, cudaStream_t stream) {
  constexpr int smem = sparse_smem_bytes<D, T>();
  static const bool smem_ok = allow_dynamic_smem(block_sparse_kernel<D, true, T, TQ>, smem) &&
                              allow_dynamic_smem(block_sparse_kernel<D, false, T, TQ>, smem);
  (void)smem_ok;
  auto kernel = g_row_offsets ? block_sparse_kernel<D, true, T, TQ> : block_sparse_kernel<D, false, T, TQ>;
  int ctas = plan.piece_off ? plan.max_pieces : plan.num_items;
  if (plan.queue) {
    static const int resident = [&] {
      int dev = 0, sms = 0, per_sm = 0;
      VLM_CUDA_CHECK(cudaGetDevice(&dev));
      VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, block_sparse_kernel<D, true, T, TQ>,
                                                                   kThreads, smem));
      return std::max(1, sms * per_sm);
    }();
    ctas = std::min(ctas, resident);
    VLM_CUDA_CHECK(cudaMemsetAsync(plan.queue, 0, sizeof(int32_t), stream));
  }
  kernel<<<ctas, kThreads, smem, stream>>>(static_cast<const TQ*>(q), H, kv_view(kv), batch.block_tables,
                                           batch.max_blocks_per_seq, plan, scale * float(M_LOG2E),
                                           static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
  if (plan.piece_off) {
    combine_kernel<D, TQ><<<plan.num_items, kThreads, 0, stream>>>(H, plan, static_cast<TQ*>(out));
    VLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void set_block_sparse_row_offsets(bool on) { g_row_offsets = on; }

void launch_block_sparse_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                                   const CudaAttentionBatch& batch, const SparsePlanView& view, float scale, void* out,
                                   cudaStream_t stream) {
  dispatch_tensor_core(kv, act, [&](auto d, auto c, auto a) {
    launch<decltype(d)::value, decltype(c), decltype(a)>(q, num_heads, kv, batch, view, scale, out, stream);
  });
}

}  // namespace vlm::cuda
