// Dense causal prefill attention on Hopper (sm_90a): wgmma over the paged cache, one launch for all
// sequences of a step (varlen, GQA, chunks over cached context). The tile loops are
// attend_query_tile / attend_query_tile_ws<PP> (prefill_sm90.cuh) driven by the causal key-tile list.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/cuda/attention/prefill_sm90.cuh"
#include "kernels/cuda/attention/prefill_sm90_launch.h"

namespace vlm::cuda {
namespace {

// The CTA's query tile. Grid (H, query tiles, num_seqs) with heads_fastest (the default), else
// (query tiles, H, num_seqs); the tile index reversed either way. CTAs start in block-index order,
// so heads-fastest starts the longest (last) tiles of every head first and the shortest last (a
// longest-first schedule: no long causal tile is left to run alone at the end), and the 7 query
// heads of a KV head read the same K/V tiles at about the same time. False when the tile lies
// past the sequence's rows.
__device__ __forceinline__ bool query_tile(const CudaAttentionBatch& batch, int H, const KVView& kv,
                                           bool heads_fastest, wg::QueryTile& qt) {
  const int s = blockIdx.z;
  const int tile = heads_fastest ? blockIdx.y : blockIdx.x, n_tiles = heads_fastest ? gridDim.y : gridDim.x;
  qt.t0 = batch.cu_seqlens_q[s];
  const int q_len = batch.cu_seqlens_q[s + 1] - qt.t0;
  qt.m0 = (n_tiles - 1 - tile) * wg::kBM;
  if (qt.m0 >= q_len) return false;
  qt.rows = min(wg::kBM, q_len - qt.m0);
  qt.pos0 = batch.context_lens[s] - q_len + qt.m0;
  qt.h = heads_fastest ? blockIdx.x : blockIdx.y;
  qt.H = H;
  qt.hk = qt.h / (H / kv.num_kv_heads);
  qt.table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  return true;
}

// The Hopper kernels, K naming the tile loop: kWgmma attend_query_tile, kWgmmaWs
// attend_query_tile_ws<false>, kWgmmaPp attend_query_tile_ws<true> (pingpong).
template <PrefillKernel K>
constexpr int kCtaThreads = K == PrefillKernel::kWgmma ? wg::kThreads : wg::kWsThreads;
template <PrefillKernel K>
constexpr int kCtaSmem = K == PrefillKernel::kWgmma ? wg::kSmemBytes
                         : K == PrefillKernel::kWgmmaWs ? wg::kWsSmemBytes : wg::kPpSmemBytes;

template <class T, class TQ, PrefillKernel K>
__global__ void __launch_bounds__(kCtaThreads<K>, 1)
prefill_sm90_kernel(const TQ* __restrict__ q, int H, KVView kv, CudaAttentionBatch batch, float scale_log2,
                    bool heads_fastest, TQ* __restrict__ out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  wg::QueryTile qt;
  if (!query_tile(batch, H, kv, heads_fastest, qt)) return;
  const wg::CausalKeyTiles tiles{(qt.pos0 + qt.rows + wg::kBN - 1) / wg::kBN};
  if constexpr (K == PrefillKernel::kWgmma) wg::attend_query_tile<T>(q, out, kv, qt, tiles, scale_log2, smem);
  else wg::attend_query_tile_ws<K == PrefillKernel::kWgmmaPp, T>(q, out, kv, qt, tiles, scale_log2, smem);
#endif
}

template <class T, class TQ, PrefillKernel K>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale, void* out,
            cudaStream_t stream) {
  // VLM_CUDA_PREFILL_ORDER=tiles: the former grid order (query tiles fastest), for benchmarks.
  static const bool heads_fastest = [] {
    const char* e = std::getenv("VLM_CUDA_PREFILL_ORDER");
    return e == nullptr || std::string(e) != "tiles";
  }();
  const unsigned tiles = unsigned((batch.max_q_len + wg::kBM - 1) / wg::kBM);
  const dim3 grid = heads_fastest ? dim3(unsigned(H), tiles, unsigned(batch.num_seqs))
                                  : dim3(tiles, unsigned(H), unsigned(batch.num_seqs));
  const bool smem_ok = allow_dynamic_smem(prefill_sm90_kernel<T, TQ, K>, kCtaSmem<K>);
  (void)smem_ok;
  prefill_sm90_kernel<T, TQ, K><<<grid, kCtaThreads<K>, kCtaSmem<K>, stream>>>(
      static_cast<const TQ*>(q), H, kv_view(kv), batch, scale * float(M_LOG2E), heads_fastest,
      static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
}

template <class T, class TQ>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale, void* out,
            PrefillKernel kernel, cudaStream_t stream) {
  if (kernel == PrefillKernel::kWgmmaPp) launch<T, TQ, PrefillKernel::kWgmmaPp>(q, H, kv, batch, scale, out, stream);
  else if (kernel == PrefillKernel::kWgmmaWs) launch<T, TQ, PrefillKernel::kWgmmaWs>(q, H, kv, batch, scale, out, stream);
  else launch<T, TQ, PrefillKernel::kWgmma>(q, H, kv, batch, scale, out, stream);
}

}  // namespace

bool prefill_sm90_supported(const PagedKVLayer& kv) {
  static const int major = [] {
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    return m;
  }();
  return major == 9 && kv.head_dim == wg::kD && (kv.dtype == DType::BF16 || kv.dtype == DType::F16);
}

void prefill_attention_sm90(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                            const CudaAttentionBatch& batch, float scale, void* out, PrefillKernel kernel,
                            cudaStream_t stream) {
  VLM_CHECK(prefill_sm90_supported(kv), "sm_90 prefill attention: needs an sm_90 GPU, D 128 and a 16-bit cache");
  dispatch_float(act, [&](auto a) {
    if (kv.dtype == DType::BF16) launch<__nv_bfloat16, decltype(a)>(q, num_heads, kv, batch, scale, out, kernel, stream);
    else launch<__half, decltype(a)>(q, num_heads, kv, batch, scale, out, kernel, stream);
  });
}

}  // namespace vlm::cuda
