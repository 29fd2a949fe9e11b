// Block-sparse prefill attention on tensor cores (see cuda_block_sparse.h). One CTA = 4 warps =
// one 64-row query block of one (sequence, head); each warp owns 16 rows, their Q fragments in
// registers and their O accumulators. A key tile is 64 key positions named by the plan (a listed
// key block through k_order, or 64 gathered columns); the positions go to shared memory beside
// the K/V rows (cp.async, two stages), and the causal mask compares them with the rows' original
// positions, so any permutation of rows or keys keeps causality.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/sparse_plan_view.h"
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
struct TileList {
  const int32_t* blocks;  // key block starts k0 (in k_order order)
  const int32_t* korder;  // nullptr: identity
  const int32_t* cols;    // gathered key positions
  int nb, nc, num_keys, maxpos;
  __device__ int count() const { return nb + (nc + kBN - 1) / kBN; }
  // Position of slot r of tile t, or -1 (past the keys, or invisible to every row of the CTA).
  __device__ int position(int t, int r) const {
    int p;
    if (t < nb) {
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
// whose rows are zero-filled). kRowOffsets: the first kBN threads look each row up once (plan
// order, then the block table) into roff[kBN] and a barrier publishes them before the copies;
// else every 16-byte chunk repeats its row's lookup (the first version; kept for the bench's
// side-by-side).
template <int D, bool kRowOffsets, class T>
__device__ __forceinline__ void load_tile(const KVView& kv, const int32_t* table, int hk, const TileList& tl, int t,
                                          T* sk, T* sv, int* kpos, int64_t* roff, int tid) {
  constexpr int kChunks = D / 8;
  const T* kbase = static_cast<const T*>(kv.k);
  const T* vbase = static_cast<const T*>(kv.v);
  if constexpr (kRowOffsets) {
    if (tid < kBN) {
      const int p = tl.position(t, tid);
      kpos[tid] = p >= 0 ? p : kNoKey;
      roff[tid] = p >= 0 ? kv.token_offset(table, hk, p) : -1;
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

template <int D, bool kRowOffsets, class T, class TQ>
__global__ void __launch_bounds__(kThreads)
block_sparse_kernel(const TQ* __restrict__ q, int H, KVView kv, const int32_t* __restrict__ block_tables,
                    int max_blocks_per_seq, SparsePlanView plan, float scale_log2, TQ* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* const kv_smem = sq + kBM * D;
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * D; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * D + kBN * D; };
  int* const kpos_smem = reinterpret_cast<int*>(kv_smem + 4 * kBN * D);  // [2][kBN]
  __shared__ int row_idx[kBM];  // chunk row of each CTA row (-1: past q_len)
  __shared__ int cta_maxpos;
  __shared__ int64_t row_off[2][kBN];  // kRowOffsets: the tile's rows in the cache

  const int32_t* item = plan.items + 4 * int64_t(blockIdx.x);
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
  const int num_tiles = tl.count();

  if (num_tiles > 0) load_tile<D, kRowOffsets>(kv, table, hk, tl, 0, sk(0), sv(0), kpos_smem, row_off[0], tid);
  tile::cp_async_commit();

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

  for (int n = 0; n < num_tiles; ++n) {
    const int st = n & 1;
    if (n + 1 < num_tiles)
      load_tile<D, kRowOffsets>(kv, table, hk, tl, n + 1, sk(st ^ 1), sv(st ^ 1), kpos_smem + (st ^ 1) * kBN,
                                row_off[st ^ 1], tid);
    tile::cp_async_commit();
    tile::cp_async_wait<1>();
    __syncthreads();  // also publishes the Q tile on the first pass
    if (n == 0) {
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

template <int D, class T, class TQ>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, const SparsePlanView& plan,
            float scale, void* out, cudaStream_t stream) {
  constexpr int smem = sparse_smem_bytes<D, T>();
  static const bool smem_ok = allow_dynamic_smem(block_sparse_kernel<D, true, T, TQ>, smem) &&
                              allow_dynamic_smem(block_sparse_kernel<D, false, T, TQ>, smem);
  (void)smem_ok;
  auto kernel = g_row_offsets ? block_sparse_kernel<D, true, T, TQ> : block_sparse_kernel<D, false, T, TQ>;
  kernel<<<plan.num_items, kThreads, smem, stream>>>(static_cast<const TQ*>(q), H, kv_view(kv), batch.block_tables,
                                                    batch.max_blocks_per_seq, plan, scale * float(M_LOG2E),
                                                    static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
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
