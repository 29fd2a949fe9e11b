// Block-sparse prefill attention on Hopper (sm_90a): wgmma over the plan's key tiles (see
// block_sparse_sm90.h). One CTA = 2 warpgroups: the producer (warpgroup 0) copies each 64-key
// tile's K/V rows (positions from the plan: listed key blocks through k_order, gathered columns,
// every-key items in position order) into SW128 shared memory, the tile's key positions beside
// them; the consumer (warpgroup 1) holds the item's Q as wgmma A fragments (read from global
// memory through q_order per piece) and computes. A resident grid takes (item, piece) from the
// plan's queue, longest first; split pieces write partials that the combine kernel merges
// (block_sparse_tiles.cuh, shared with the mma.sync kernel).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention/prefill_sm90_launch.h"
#include "kernels/cuda/attention/wgmma_tile.cuh"
#include "kernels/cuda/sparse_prefill/block_sparse_sm90.h"
#include "kernels/cuda/sparse_prefill/block_sparse_tiles.cuh"

namespace vlm::cuda {
namespace {

using sparse::kBM;
using sparse::kBN;
constexpr int kD = 128;
constexpr int kThreads = 256;  // producer + consumer warpgroup
constexpr int kTileElems = kBN * kD;
constexpr int kStages = 3;  // K/V stages in shared memory (2 CTAs per SM)
// Registers per thread after setmaxnreg (the CTA's 2 x 128 x 128 at launch, 2 CTAs per SM).
constexpr int kProducerRegs = 56, kConsumerRegs = 200;

// Dynamic shared memory (1024-byte aligned for the swizzle): kStages x (K, V) [64][128], then the
// tiles' key positions [kStages][64], the item's rows [64], the mbarriers, the piece's scalars and
// the rows' cache offsets [2][64].
struct Smem {
  static constexpr int kBytes =
      kStages * 2 * kTileElems * 2 + kStages * kBN * 4 + kBM * 4 + kStages * 2 * 8 + 8 * 4 + 2 * kBN * 8;
  unsigned char* raw;
  template <class T>
  __device__ T* k(int st) const { return reinterpret_cast<T*>(raw) + st * 2 * kTileElems; }
  template <class T>
  __device__ T* v(int st) const { return k<T>(st) + kTileElems; }
  __device__ int* kpos(int st) const {
    return reinterpret_cast<int*>(raw + kStages * 2 * kTileElems * 2) + st * kBN;
  }
  __device__ int* rows() const { return kpos(kStages); }
  __device__ uint64_t* full() const { return reinterpret_cast<uint64_t*>(rows() + kBM); }
  __device__ uint64_t* empty() const { return full() + kStages; }
  __device__ int* scalars() const { return reinterpret_cast<int*>(empty() + kStages); }  // piece index, item, piece, pieces, maxpos
  __device__ int64_t* roff(int b) const { return reinterpret_cast<int64_t*>(scalars() + 8) + b * kBN; }
};

__device__ __forceinline__ int64_t row_offset(const KVView& kv, const int32_t* table, int hk, int pos) {
  return pos >= 0 ? kv.token_offset(table, hk, pos) : -1;
}

// The producer warpgroup's part of one piece: for each of the piece's tiles [t_begin, t_end),
// threads tid < 64 look up one tile row's plan position and cache offset each (the position two
// tiles ahead, the offset one tile ahead, so the dependent loads overlap the copies in flight) and
// share the offsets through shared memory; then the copies run along the rows: thread tid copies
// 16-byte chunk tid % 16 of rows tid / 16 + 8 j, j < 8 (a warp reads 2 whole rows per
// instruction: every 32-byte L2 sector once). k0: the CTA's running tile count (stage k %
// kStages, phase k / kStages). A stage is published (full) once its copies landed, refilled once
// the consumer released it (empty).
template <class T>
__device__ __forceinline__ void produce(const KVView& kv, const int32_t* table, int hk, const sparse::TileList& tl,
                                        int t_begin, int t_end, int k0, const Smem& sm, int tid) {
  const int n = t_end - t_begin;
  if (n <= 0) return;
  const T* kbase = static_cast<const T*>(kv.k);
  const T* vbase = static_cast<const T*>(kv.v);
  const int lr = tid < kBN ? tid : -1;  // the row this thread looks up (-1: none)
  auto position = [&](int t) { return lr >= 0 && t < t_end ? tl.position(t, lr) : -1; };
  int pos = position(t_begin);
  int pos_next = position(t_begin + 1);
  int64_t off = row_offset(kv, table, hk, pos);
  const int c = tid & 15;
  for (int i = 0; i < n; ++i) {
    const int k = k0 + i, st = k % kStages;
    if (k >= kStages) wg::mbar_wait(&sm.empty()[st], ((k / kStages) - 1) & 1);
    T* const sk = sm.template k<T>(st);
    T* const sv = sm.template v<T>(st);
    int64_t* const ro = sm.roff(i & 1);  // two buffers: the barrier below orders their reuse
    if (tid < kBN) {
      sm.kpos(st)[tid] = pos >= 0 ? pos : sparse::kNoKey;
      ro[tid] = off;
    }
    asm volatile("bar.sync 1, 128;\n" ::: "memory");  // the producer warpgroup only
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int row = (tid >> 4) + 8 * j;
      const int64_t ro_row = ro[row];
      const int s = wg::sw128<kBN>(row, c);
      const int64_t o = ro_row >= 0 ? ro_row + c * 8 : 0;
      tile::cp_async16(sk + s, kbase + o, ro_row >= 0 ? 16 : 0);
      tile::cp_async16(sv + s, vbase + o, ro_row >= 0 ? 16 : 0);
    }
    tile::cp_async_commit();
    pos = pos_next;
    off = row_offset(kv, table, hk, pos);
    pos_next = position(t_begin + i + 2);
    if (i >= 1) {  // tile i - 1 landed: publish it
      tile::cp_async_wait<1>();
      wg::fence_proxy_async();
      wg::mbar_arrive(&sm.full()[(k - 1) % kStages]);
    }
  }
  tile::cp_async_wait<0>();
  wg::fence_proxy_async();
  wg::mbar_arrive(&sm.full()[(k0 + n - 1) % kStages]);
}

// The causal mask by original positions: key slot > row position -> -inf (empty slots: kNoKey).
__device__ __forceinline__ void mask_positions(float (&s)[8][4], const int* kpos, const int (&rpos)[2], int t4) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int2 kk = *reinterpret_cast<const int2*>(kpos + j * 8 + 2 * t4);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if ((e & 1 ? kk.y : kk.x) > rpos[e >> 1]) s[j][e] = -INFINITY;
  }
}

// S = Q K^T of the tile in stage st (not committed), Q from the consumer's registers.
template <class T>
__device__ __forceinline__ void issue_s(float (&s)[8][4], const uint32_t (&q)[8][4], const Smem& sm, int st) {
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) wg::mma_rs_n64<T>(s, q[kk], wg::desc_k_major<kBN>(sm.template k<T>(st), 0, kk), kk > 0);
}
template <class T>
__device__ __forceinline__ void issue_pv(float (&o)[16][4], const uint32_t (&p)[4][4], const Smem& sm, int st) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) wg::mma_rs_mn<T>(o, p[kk], wg::desc_mn_major<kBN>(sm.template v<T>(st), kk));
}

// The consumer's Q as wgmma A fragments (mma.sync's A layout per k-step of 16 columns: rows
// warp_row + g and + 8, columns 2 t4 (+1) and 2 t4 + 8 (+1)), read from q through the item's rows
// (zero past q_len) and converted to T.
template <class T, class TQ>
__device__ __forceinline__ void load_q_frags(uint32_t (&a)[8][4], const TQ* __restrict__ q, int H, int h, int t0,
                                             const int* rows, int warp_row, int lane) {
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int ri = rows[warp_row + g + 8 * r];
    const TQ* src = q + (int64_t(t0 + (ri >= 0 ? ri : 0)) * H + h) * kD + 2 * t4;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const TQ* e = src + kk * 16 + hi * 8;
        uint32_t w = 0;
        if (ri >= 0) {
          if constexpr (std::is_same_v<T, TQ>) w = *reinterpret_cast<const uint32_t*>(e);
          else w = tile::pack2<T>(to_f32(e[0]), to_f32(e[1]));
        }
        a[kk][r + 2 * hi] = w;
      }
  }
}

// The consumer warpgroup's part of one piece of n tiles (k0 as in produce): per tile S, mask,
// online softmax, O += P V.
template <class T>
__device__ __forceinline__ void consume(float (&o)[16][4], float (&m)[2], float (&l)[2], uint32_t (&q)[8][4], int n,
                                        int k0, const Smem& sm, const int (&rpos)[2], float scale_log2, int lane) {
  const int t4 = lane % 4;
  float s[8][4];
  uint32_t p[4][4];
  for (int i = 0; i < n; ++i) {
    const int k = k0 + i, st = k % kStages;
    wg::mbar_wait(&sm.full()[st], (k / kStages) & 1);
    wg::fence();
    issue_s<T>(s, q, sm, st);
    wg::commit();
    wg::wait<0>();
    wg::fence_regs(s);
    wg::fence_regs(q);
    mask_positions(s, sm.kpos(st), rpos, t4);
    tile::online_softmax<kD, 8>(s, m, l, o, scale_log2);
    wg::pack_p<T>(s, p);
    wg::fence_regs(o);
    wg::fence();
    issue_pv<T>(o, p, sm, st);
    wg::commit();
    wg::wait<0>();
    wg::fence_regs(o);
    wg::fence_regs(p);
    wg::mbar_arrive(&sm.empty()[st]);
  }
}

// The piece loop of one warpgroup (both run it in step: the CTA's barriers): take the next
// piece (thread 0: from plan.queue, or blockIdx.x once), set up its item (rows through q_order,
// their largest position), then body(piece, item, head descriptor, tile list, t_begin, t_end, k0).
template <class Body>
__device__ __forceinline__ void piece_loop(const SparsePlanView& plan, const Smem& sm, Body&& body) {
  const int tid = threadIdx.x;
  int* const scal = sm.scalars();
  const int total = sparse::total_pieces(plan);
  int k0 = 0;  // tiles this CTA ran so far (the pipeline's stage and phase)
  for (int first = 1;; first = 0) {
    if (tid == 0) {
      const int p = plan.queue ? atomicAdd(plan.queue, 1) : first ? int(blockIdx.x) : total;
      scal[0] = p;
      if (p < total) {
        const sparse::PieceRef pr = sparse::find_piece(plan, p);
        scal[1] = pr.it, scal[2] = pr.piece, scal[3] = pr.npieces;
      }
      scal[4] = -1;
    }
    __syncthreads();
    if (scal[0] >= total) break;
    const sparse::PieceRef pr{scal[1], scal[2], scal[3]};
    const int32_t* item = plan.items + 4 * int64_t(pr.it);
    const int qb = item[2];
    const SparseHeadDesc hd = plan.descs[item[3]];
    if (tid < kBM) {
      const int r = sparse::item_row(plan.data, hd, qb * kBM + tid);
      sm.rows()[tid] = r;
      if (r >= 0) atomicMax(&scal[4], hd.num_keys - hd.q_len + r);
    }
    __syncthreads();
    const sparse::TileList tl = sparse::tile_list(plan.data, hd, qb, scal[4]);
    const int num_tiles = tl.count();
    const int t_begin = int(int64_t(pr.piece) * num_tiles / pr.npieces);
    const int t_end = int(int64_t(pr.piece + 1) * num_tiles / pr.npieces);
    body(pr, item, hd, tl, t_begin, t_end, k0);
    k0 += t_end - t_begin;
    __syncthreads();  // the piece's shared state (Q, rows, scalars) is no longer read
  }
}

template <class T, class TQ>
__global__ void __launch_bounds__(kThreads, 2)
block_sparse_sm90_kernel(const TQ* __restrict__ q, int H, KVView kv, const int32_t* __restrict__ block_tables,
                         int max_blocks_per_seq, SparsePlanView plan, float scale_log2, TQ* __restrict__ out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const Smem sm{smem_raw};
  const int tid = threadIdx.x;
  if (tid == 0) {
    if (tile::smem_addr(smem_raw) & 1023) __trap();  // the swizzle needs 1024-byte alignment
    for (int s = 0; s < kStages; ++s) {
      wg::mbar_init(&sm.full()[s], 128);
      wg::mbar_init(&sm.empty()[s], 128);
    }
  }
  __syncthreads();
  const int wgi = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform for the compiler
  const int wtid = tid % 128, warp = wtid / 32, lane = tid % 32;
  if (wgi == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    piece_loop(plan, sm, [&](const sparse::PieceRef&, const int32_t* item, const SparseHeadDesc& hd,
                             const sparse::TileList& tl, int t_begin, int t_end, int k0) {
      produce<T>(kv, block_tables + int64_t(item[0]) * max_blocks_per_seq, item[1] / (H / kv.num_kv_heads), tl,
                 t_begin, t_end, k0, sm, wtid);
    });
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    piece_loop(plan, sm, [&](const sparse::PieceRef& pr, const int32_t* item, const SparseHeadDesc& hd,
                             const sparse::TileList&, int t_begin, int t_end, int k0) {
      const int g = lane / 4, off = hd.num_keys - hd.q_len;
      int rpos[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int ri = sm.rows()[warp * 16 + g + 8 * r];
        rpos[r] = ri >= 0 ? off + ri : -1;
      }
      float o[16][4] = {};
      float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
      uint32_t qf[8][4];
      load_q_frags<T>(qf, q, H, item[1], hd.t0, sm.rows(), warp * 16, lane);
      consume<T>(o, m, l, qf, t_end - t_begin, k0, sm, rpos, scale_log2, lane);
      sparse::store_item_rows<kD, TQ>(plan, pr, o, m, l, warp * 16, sm.rows(), hd.t0, H, item[1], out, lane);
    });
  }
#endif
}

template <class T, class TQ>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, const SparsePlanView& plan,
            float scale, void* out, cudaStream_t stream) {
  constexpr int smem = Smem::kBytes;
  auto* kernel = block_sparse_sm90_kernel<T, TQ>;
  const bool smem_ok = allow_dynamic_smem(kernel, smem);
  (void)smem_ok;
  static const int resident = sparse::resident_ctas(kernel, kThreads, smem);
  const int ctas = sparse::launch_ctas(plan, resident, stream);
  kernel<<<ctas, kThreads, smem, stream>>>(static_cast<const TQ*>(q), H, kv_view(kv), batch.block_tables,
                                           batch.max_blocks_per_seq, plan, scale * float(M_LOG2E),
                                           static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
  sparse::combine_pieces<kD>(H, plan, static_cast<TQ*>(out), stream);
}

BlockSparseKernel g_kernel = BlockSparseKernel::kAuto;  // set_block_sparse_kernel

}  // namespace

void set_block_sparse_kernel(BlockSparseKernel k) { g_kernel = k; }

BlockSparseKernel block_sparse_kernel_for(const PagedKVLayer& kv) {
  static const BlockSparseKernel env = [] {
    const char* e = std::getenv("VLM_CUDA_SPARSE_KERNEL");
    const std::string v = e ? e : "";
    return v == "mma" ? BlockSparseKernel::kMma : v == "wgmma" ? BlockSparseKernel::kWgmma : BlockSparseKernel::kAuto;
  }();
  const BlockSparseKernel k = g_kernel != BlockSparseKernel::kAuto ? g_kernel : env;
  if (k == BlockSparseKernel::kMma || !prefill_sm90_supported(kv)) return BlockSparseKernel::kMma;
  return BlockSparseKernel::kWgmma;
}

void launch_block_sparse_sm90(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                              const CudaAttentionBatch& batch, const SparsePlanView& plan, float scale, void* out,
                              cudaStream_t stream) {
  VLM_CHECK(prefill_sm90_supported(kv), "sm_90 block-sparse attention: needs an sm_90 GPU, D 128 and a 16-bit cache");
  dispatch_float(act, [&](auto a) {
    using TQ = decltype(a);
    const auto run = [&](auto c) {
      using T = decltype(c);
      launch<T, TQ>(q, num_heads, kv, batch, plan, scale, out, stream);
    };
    if (kv.dtype == DType::BF16) run(__nv_bfloat16{});
    else run(__half{});
  });
}

}  // namespace vlm::cuda
