// f32 attention over the paged cache with f32 FMA only (the exact mode: no TF32). One CTA of 128
// threads = a 32-row query tile of one (sequence, head); thread (r, c) = (tid / 4, tid % 4) owns
// row r, keys c, c+4, ... of each 32-key tile and output columns c, c+4, ...; K/V tiles in
// shared memory (padded rows: no bank conflicts), online softmax.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention/attention_f32.cuh"
#include "kernels/cuda/attention/cuda_attention_common.cuh"

namespace vlm::cuda {
namespace {

constexpr int kRows = 32, kKeys = 32, kThreads = 128;

template <int D>
constexpr int f32_smem_bytes() {
  return (kRows * (D + 1) + kKeys * (D + 1) + kKeys * D + kRows * (kKeys + 1)) * 4;
}

template <int D, class TQ>
__global__ void __launch_bounds__(kThreads)
attention_f32_kernel(const TQ* __restrict__ q, int H, KVView kv, CudaAttentionBatch batch, float scale,
                     TQ* __restrict__ out, bool decode) {
  extern __shared__ float smem[];
  float* sq = smem;                       // [kRows][D+1]
  float* sk = sq + kRows * (D + 1);       // [kKeys][D+1]
  float* sv = sk + kKeys * (D + 1);       // [kKeys][D]
  float* sp = sv + kKeys * D;             // [kRows][kKeys+1]
  const int s = blockIdx.z, h = blockIdx.y;
  const int t0 = decode ? s : batch.cu_seqlens_q[s];
  const int q_len = decode ? 1 : batch.cu_seqlens_q[s + 1] - t0;
  const int m0 = blockIdx.x * kRows;
  if (m0 >= q_len) return;
  const int ctx = batch.context_lens[s];
  const int hk = h / (H / kv.num_kv_heads);
  if (decode && sink_group_skipped(batch.group_skip, batch.group_surrogate, s, hk, kv.num_kv_heads, D, H, h, h + 1,
                                   int(threadIdx.x), kThreads, out))
    return;  // SinkRouter: a sink group's head, K/V not read
  const int32_t* table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  const float* kc = static_cast<const float*>(kv.k);
  const float* vc = static_cast<const float*>(kv.v);
  const int tid = threadIdx.x, r = tid / 4, c = tid % 4;
  const int rows = min(kRows, q_len - m0);
  const int pos0 = ctx - q_len + m0;
  const int key_end = pos0 + rows;
  const int my_pos = pos0 + r;

  for (int i = tid; i < kRows * D; i += kThreads) {
    const int rr = i / D, d = i % D;
    sq[rr * (D + 1) + d] = rr < rows ? to_f32(q[(int64_t(t0 + m0 + rr) * H + h) * D + d]) : 0.f;
  }
  float acc[D / 4] = {};
  float m = -INFINITY, l = 0.f;
  for (int key0 = 0; key0 < key_end; key0 += kKeys) {
    __syncthreads();
    for (int i = tid; i < kKeys * D; i += kThreads) {
      const int j = i / D, d = i % D, key = key0 + j;
      float kx = 0.f, vx = 0.f;
      if (key < key_end) {
        const int64_t off = kv.offset(table[key / kv.block_size], hk, key % kv.block_size) + d;
        kx = kc[off];
        vx = vc[off];
      }
      sk[j * (D + 1) + d] = kx;
      sv[j * D + d] = vx;
    }
    __syncthreads();
    float sc[kKeys / 4];
    float mx = m;
#pragma unroll
    for (int k = 0; k < kKeys / 4; ++k) {
      const int j = c + 4 * k;
      float dot = 0.f;
#pragma unroll 8
      for (int d = 0; d < D; ++d) dot = fmaf(sq[r * (D + 1) + d], sk[j * (D + 1) + d], dot);
      sc[k] = key0 + j > my_pos ? -INFINITY : dot * scale;
      mx = fmaxf(mx, sc[k]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == -INFINITY ? 0.f : mx;
    const float corr = expf(m - base);
    m = mx;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kKeys / 4; ++k) {
      const float p = expf(sc[k] - base);
      sum += p;
      sp[r * (kKeys + 1) + c + 4 * k] = p;
    }
    l = l * corr + sum;
    __syncwarp();
#pragma unroll
    for (int k = 0; k < D / 4; ++k) acc[k] *= corr;
    for (int j = 0; j < kKeys; ++j) {
      const float p = sp[r * (kKeys + 1) + j];
#pragma unroll
      for (int k = 0; k < D / 4; ++k) acc[k] = fmaf(p, sv[j * D + c + 4 * k], acc[k]);
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (r >= rows) return;
  TQ* dst = out + (int64_t(t0 + m0 + r) * H + h) * D;
#pragma unroll
  for (int k = 0; k < D / 4; ++k) dst[c + 4 * k] = from_f32<TQ>(acc[k] / l);
}

template <int D, class TQ>
void launch_f32(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale, void* out,
                bool decode, cudaStream_t stream) {
  constexpr int smem = f32_smem_bytes<D>();
  const bool smem_ok = allow_dynamic_smem(attention_f32_kernel<D, TQ>, smem);
  (void)smem_ok;
  const int rows = decode ? 1 : batch.max_q_len;
  const dim3 grid((rows + kRows - 1) / kRows, H, batch.num_seqs);
  attention_f32_kernel<D, TQ><<<grid, kThreads, smem, stream>>>(static_cast<const TQ*>(q), H, kv_view(kv), batch,
                                                                scale, static_cast<TQ*>(out), decode);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_f32(const void* q, DType act, int num_heads, const PagedKVLayer& kv, const CudaAttentionBatch& batch,
                   float scale, void* out, bool decode, cudaStream_t stream) {
  VLM_CHECK(kv.dtype == DType::F32, "attention_f32: cache dtype {}", dtype_name(kv.dtype));
  dispatch_float(act, [&](auto a) {
    using TQ = decltype(a);
    if (kv.head_dim == 64) launch_f32<64, TQ>(q, num_heads, kv, batch, scale, out, decode, stream);
    else launch_f32<128, TQ>(q, num_heads, kv, batch, scale, out, decode, stream);
  });
}

}  // namespace vlm::cuda
