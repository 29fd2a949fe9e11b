// Prefill attention on tensor cores (FlashAttention-2 manner) over the paged cache.
// One CTA = 4 warps = a 128-row query tile of one (sequence, head); each warp owns 32 rows (two
// 16-row mma slabs, so every K/V fragment read from shared memory feeds two mma) and their O
// accumulators; Q stays in shared memory; 64-key K/V tiles stream through shared memory
// (cp.async, two stages). The causal diagonal needs masking only in the last tiles. Query tiles are
// scheduled longest first. An F32 cache goes to the f32 (no TF32) kernel in attention_f32.cu.
// An F8_E4M3 cache (kFp8) runs this kernel with bf16 mma: each K/V tile is copied as bytes and
// converted to bf16 in shared memory (fp8_kv_tile.cuh); K's per-head scale multiplies the softmax
// scale, V's the output rows.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cuda/attention/attention_f32.cuh"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/fp8_kv_tile.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/attention/prefill_sm90_launch.h"

namespace vlm::cuda {
namespace {

using namespace tile::fa2;  // the CTA shape: kWarps, kMT, kWarpRows, kBM, kThreads

template <int D, int kBN, class T>
constexpr int prefill_smem_bytes() {
  // Q, then two stages of K and V (FP8: two stages of byte tiles, then one bf16 tile of K and V:
  // the same bytes)
  return (kBM * D + 2 * 2 * kBN * D) * int(sizeof(T));
}

// Grid: (query tiles, H, num_seqs); tile index reversed so the longest (last) tiles start first.
template <int D, int kBN, class T, class TQ, bool kFp8>  // kBN: keys per tile
__global__ void __launch_bounds__(kThreads, 2)
prefill_kernel(const TQ* __restrict__ q, int H, KVView kv, CudaAttentionBatch batch, float scale_log2,
               TQ* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  // Stage i: K at kv_smem + i * 2 * kBN * D, V right after it (no arrays: they would live in
  // local memory when indexed by the loop counter).
  T* const kv_smem = sq + kBM * D;
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * D; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * D + kBN * D; };
  uint8_t* const fp8_smem = reinterpret_cast<uint8_t*>(kv_smem);  // FP8: byte stages, then bf16 K, V
  auto bk = [&](int i) { return fp8_smem + i * 2 * kBN * D; };
  auto bv = [&](int i) { return fp8_smem + i * 2 * kBN * D + kBN * D; };
  T* const ck = reinterpret_cast<T*>(fp8_smem + 4 * kBN * D);
  T* const cv = ck + kBN * D;

  const int s = blockIdx.z, h = blockIdx.y;
  const int t0 = batch.cu_seqlens_q[s];
  const int q_len = batch.cu_seqlens_q[s + 1] - t0;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBM;
  if (m0 >= q_len) return;
  const int ctx = batch.context_lens[s];
  const int hk = h / (H / kv.num_kv_heads);
  const int32_t* table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int pos0 = ctx - q_len + m0;                       // position of the tile's first row
  const int rows = min(kBM, q_len - m0);
  const int key_end = pos0 + rows;                          // keys [0, key_end) are visible to some row
  const int num_tiles = (key_end + kBN - 1) / kBN;
  if constexpr (kFp8) scale_log2 *= kv.k_scale[hk];

  if constexpr (kFp8) tile::load_kv_tile_fp8<kBN, D, kThreads>(kv, table, hk, 0, key_end, bk(0), bv(0), tid);
  else tile::load_kv_tile<kBN, D, kThreads>(kv, table, hk, 0, key_end, sk(0), sv(0), tid);
  tile::cp_async_commit();

  // Q tile -> shared (converted to T; rows past q_len are zero).
  for (int i = tid; i < kBM * D / 8; i += kThreads) {
    const int r = i / (D / 8), c = (i % (D / 8)) * 8;
    T* dst = sq + tile::swz<D>(r, c);
    const TQ* src = q + (int64_t(t0 + m0 + r) * H + h) * D + c;
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = from_f32<T>(r < rows ? to_f32(src[e]) : 0.f);
  }
  float o[kMT][D / 8][4] = {};
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
  const int g = lane / 4, t4 = lane % 4;
  const int warp_pos = pos0 + warp * kWarpRows;  // position of the warp's first row

  for (int n = 0; n < num_tiles; ++n) {
    const int key0 = n * kBN;
    if (n + 1 < num_tiles) {
      if constexpr (kFp8)
        tile::load_kv_tile_fp8<kBN, D, kThreads>(kv, table, hk, key0 + kBN, key_end, bk((n + 1) & 1),
                                                 bv((n + 1) & 1), tid);
      else
        tile::load_kv_tile<kBN, D, kThreads>(kv, table, hk, key0 + kBN, key_end, sk((n + 1) & 1), sv((n + 1) & 1),
                                             tid);
    }
    tile::cp_async_commit();
    tile::cp_async_wait<1>();
    __syncthreads();  // also publishes the Q tile on the first pass
    const T* tk = sk(n & 1);
    const T* tv = sv(n & 1);
    if constexpr (kFp8) {  // this stage's bytes -> the bf16 tiles (the previous tile's mma is done: synced)
      tile::convert_fp8_tile<kBN, D, kThreads>(bk(n & 1), ck, tid);
      tile::convert_fp8_tile<kBN, D, kThreads>(bv(n & 1), cv, tid);
      __syncthreads();
      tk = ck;
      tv = cv;
    }
    if (key0 <= warp_pos + kWarpRows - 1) {  // a warp whose rows see none of this tile skips it
      float sc[kMT][kBN / 8][4] = {};
      tile::qk_tile_smem<D, kBN / 8, kMT>(sc, sq, warp * kWarpRows, tk, 0, lane);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if (key0 + kBN - 1 > warp_pos + mt * 16) {  // the causal diagonal crosses this slab
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = key0 + j * 8 + 2 * t4 + (e & 1);
              if (key > warp_pos + mt * 16 + g + 8 * (e >> 1)) sc[mt][j][e] = -INFINITY;
            }
        }
        tile::online_softmax<D, kBN / 8>(sc[mt], m[mt], l[mt], o[mt], scale_log2);
      }
      tile::pv_tile<D, kBN / 8, kMT>(o, sc, tv, 0, lane);
    }
    __syncthreads();
  }

  if constexpr (kFp8) {  // O is linear in V: its scale once, on the unnormalized rows
    const float vs = kv.v_scale[hk];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][n][e] *= vs;
  }
  tile::store_slabs<D>(out + (int64_t(t0 + m0) * H + h) * D, int64_t(H) * D, D, o, l, warp * kWarpRows, rows, lane);
}

template <int D, int kBN, class T, class TQ, bool kFp8>
void launch_prefill_bn(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale,
                       void* out, cudaStream_t stream) {
  constexpr int smem = prefill_smem_bytes<D, kBN, T>();
  const bool smem_ok = allow_dynamic_smem(prefill_kernel<D, kBN, T, TQ, kFp8>, smem);
  (void)smem_ok;
  const dim3 grid((batch.max_q_len + kBM - 1) / kBM, H, batch.num_seqs);
  prefill_kernel<D, kBN, T, TQ, kFp8><<<grid, kThreads, smem, stream>>>(static_cast<const TQ*>(q), H, kv_view(kv), batch,
                                                             scale * float(M_LOG2E), static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
}

// Keys per tile: 64 unless VLM_CUDA_PREFILL_BN=32 (a tuning switch for bench_cuda_attention).
template <int D, class T, class TQ, bool kFp8>
void launch_prefill(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale,
                    void* out, cudaStream_t stream) {
  static const bool bn32 = [] {
    const char* e = std::getenv("VLM_CUDA_PREFILL_BN");
    return e != nullptr && std::string(e) == "32";
  }();
  if (bn32) launch_prefill_bn<D, 32, T, TQ, kFp8>(q, H, kv, batch, scale, out, stream);
  else launch_prefill_bn<D, 64, T, TQ, kFp8>(q, H, kv, batch, scale, out, stream);
}

// The Hopper kernel kAuto takes (measured: bench/RESULTS.md, "GPU attention kernels").
constexpr PrefillKernel kDefaultSm90 = PrefillKernel::kWgmmaPp;

}  // namespace

void paged_prefill_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                             const CudaAttentionBatch& batch, float scale, void* out, cudaStream_t stream,
                             PrefillKernel kernel) {
  check_tiled_attention(kv, num_heads, "prefill attention");
  if (batch.num_seqs == 0 || batch.max_q_len == 0) return;
  if (kv.dtype == DType::F32) {
    attention_f32(q, act, num_heads, kv, batch, scale, out, /*decode=*/false, stream);
    return;
  }
  if (kv.dtype == DType::F8_E4M3) {  // the mma.sync kernel (the wgmma ones read 16-bit caches)
    check_fp8_cache(kv, "prefill attention");
    dispatch_fp8_cache(kv, act, [&](auto d, auto a) {
      launch_prefill<decltype(d)::value, __nv_bfloat16, decltype(a), true>(q, num_heads, kv, batch, scale, out,
                                                                           stream);
    });
    return;
  }
  static const PrefillKernel env_choice = [] {
    const char* e = std::getenv("VLM_CUDA_PREFILL_KERNEL");
    const std::string v = e ? e : "";
    return v == "mma" ? PrefillKernel::kMmaSync : v == "wgmma" ? PrefillKernel::kWgmma
                                                : v == "ws"    ? PrefillKernel::kWgmmaWs
                                                : v == "pp"    ? PrefillKernel::kWgmmaPp
                                                               : PrefillKernel::kAuto;
  }();
  if (kernel == PrefillKernel::kAuto) kernel = env_choice == PrefillKernel::kAuto ? kDefaultSm90 : env_choice;
  if (kernel != PrefillKernel::kMmaSync && prefill_sm90_supported(kv)) {
    prefill_attention_sm90(q, act, num_heads, kv, batch, scale, out, kernel, stream);
    return;
  }
  dispatch_tensor_core(kv, act, [&](auto d, auto c, auto a) {
    launch_prefill<decltype(d)::value, decltype(c), decltype(a), false>(q, num_heads, kv, batch, scale, out, stream);
  });
}

}  // namespace vlm::cuda
