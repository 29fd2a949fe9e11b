// Dense causal prefill attention on Hopper (sm_90a): wgmma over the paged cache, one launch for all
// sequences of a step (varlen, GQA, chunks over cached context). The tile loop is
// attend_query_tile (prefill_sm90.cuh) driven by the causal key-tile list.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention/prefill_sm90.cuh"
#include "kernels/cuda/attention/prefill_sm90_launch.h"

namespace vlm::cuda {
namespace {

// Grid: (query tiles, H, num_seqs); tile index reversed so the longest (last) tiles start first.
template <class T, class TQ>
__global__ void __launch_bounds__(wg::kThreads, 1)
prefill_sm90_kernel(const TQ* __restrict__ q, int H, KVView kv, CudaAttentionBatch batch, float scale_log2,
                    TQ* __restrict__ out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const int s = blockIdx.z;
  wg::QueryTile qt;
  qt.t0 = batch.cu_seqlens_q[s];
  const int q_len = batch.cu_seqlens_q[s + 1] - qt.t0;
  qt.m0 = (gridDim.x - 1 - blockIdx.x) * wg::kBM;
  if (qt.m0 >= q_len) return;
  qt.rows = min(wg::kBM, q_len - qt.m0);
  qt.pos0 = batch.context_lens[s] - q_len + qt.m0;
  qt.h = blockIdx.y;
  qt.H = H;
  qt.hk = qt.h / (H / kv.num_kv_heads);
  qt.table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  const wg::CausalKeyTiles tiles{(qt.pos0 + qt.rows + wg::kBN - 1) / wg::kBN};
  wg::attend_query_tile<T>(q, out, kv, qt, tiles, scale_log2, smem);
#endif
}

template <class T, class TQ>
void launch(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale, void* out,
            cudaStream_t stream) {
  static const bool smem_ok = allow_dynamic_smem(prefill_sm90_kernel<T, TQ>, wg::kSmemBytes);
  (void)smem_ok;
  const dim3 grid((batch.max_q_len + wg::kBM - 1) / wg::kBM, H, batch.num_seqs);
  prefill_sm90_kernel<T, TQ><<<grid, wg::kThreads, wg::kSmemBytes, stream>>>(
      static_cast<const TQ*>(q), H, kv_view(kv), batch, scale * float(M_LOG2E), static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
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
                            const CudaAttentionBatch& batch, float scale, void* out, cudaStream_t stream) {
  VLM_CHECK(prefill_sm90_supported(kv), "sm_90 prefill attention: needs an sm_90 GPU, D 128 and a 16-bit cache");
  dispatch_float(act, [&](auto a) {
    if (kv.dtype == DType::BF16) launch<__nv_bfloat16, decltype(a)>(q, num_heads, kv, batch, scale, out, stream);
    else launch<__half, decltype(a)>(q, num_heads, kv, batch, scale, out, stream);
  });
}

}  // namespace vlm::cuda
