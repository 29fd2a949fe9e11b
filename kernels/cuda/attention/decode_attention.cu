// Decode attention split along the context (FlashDecoding) on tensor cores.
// Plan (host, from the batch's maxima and the SM count): a partition length P (a multiple of 64
// keys) so that num_seqs * Hkv * splits fills the GPU about four CTAs per SM; sequence s has
// ceil(context_lens[s] / P) splits. Split kernel, grid (max_splits, Hkv, num_seqs), 4 warps: the
// G = H / Hkv query heads of the group are the 16 rows of one mma tile (rows past G are zero), so
// every K/V element is loaded once per group; each warp takes 16 keys of every 64-key tile with its
// own online softmax, and the 4 warps are merged in shared memory. With one split in all the kernel
// writes the output; otherwise it writes unnormalized partials (O, max, sum) to the workspace and
// the reduce kernel (grid (num_seqs, H), D threads) merges the splits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention/attention_f32.cuh"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"

namespace vlm::cuda {
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kBN = 64, kRows = 16;

struct DecodePlan {
  int partition = 0;   // keys per split
  int max_splits = 0;  // splits of the longest sequence
};

DecodePlan plan_decode(int num_seqs, int num_kv_heads, int max_context_len) {
  static const int sms = [] {
    int dev = 0, n = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  const int pairs = std::max(1, num_seqs * num_kv_heads);
  const int want = std::max(1, (4 * sms + pairs - 1) / pairs);
  const int ctx = std::max(1, max_context_len);
  int partition = (ctx + want - 1) / want;
  partition = std::max(128, (partition + kBN - 1) / kBN * kBN);
  return {partition, (ctx + partition - 1) / partition};
}

template <int D, class T>
constexpr int decode_smem_bytes() {
  return std::max((kRows * D + 2 * 2 * kBN * D) * int(sizeof(T)),
                  kRows * D * int(sizeof(T)) + kWarps * kRows * (D + 2) * 4);
}

template <int D, class T, class TQ>
__global__ void __launch_bounds__(kThreads)
decode_split_kernel(const TQ* __restrict__ q, int H, KVView kv, CudaAttentionBatch batch, float scale_log2,
                    int partition, float* __restrict__ ws, TQ* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  // Stage i: K at kv_smem + i * 2 * kBN * D, V right after it (no arrays: they would live in
  // local memory when indexed by the loop counter).
  T* const kv_smem = sq + kRows * D;
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * D; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * D + kBN * D; };
  const int split = blockIdx.x, hk = blockIdx.y, s = blockIdx.z;
  const int ctx = batch.context_lens[s];
  const int k_begin = split * partition;
  if (k_begin >= ctx) return;
  const int k_end = min(ctx, k_begin + partition);
  const int G = H / kv.num_kv_heads;
  const int32_t* table = batch.block_tables + int64_t(s) * batch.max_blocks_per_seq;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int num_tiles = (k_end - k_begin + kBN - 1) / kBN;

  tile::load_kv_tile<kBN, D, kThreads>(kv, table, hk, k_begin, k_end, sk(0), sv(0), tid);
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

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int t4 = lane % 4, g = lane / 4;
  for (int n = 0; n < num_tiles; ++n) {
    const int key0 = k_begin + n * kBN;
    if (n + 1 < num_tiles)
      tile::load_kv_tile<kBN, D, kThreads>(kv, table, hk, key0 + kBN, k_end, sk((n + 1) & 1), sv((n + 1) & 1), tid);
    tile::cp_async_commit();
    tile::cp_async_wait<1>();
    __syncthreads();
    float sc[2][4] = {};
    tile::qk_tile<D, 2>(sc, qf, sk(n & 1), warp * 16, lane);
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + warp * 16 + j * 8 + 2 * t4 + (e & 1);
        sc[j][e] = key >= k_end ? -INFINITY : sc[j][e] * scale_log2;
      }
    tile::online_softmax<D, 2>(sc, m, l, o);
    tile::pv_tile<D, 2>(o, sc, sv(n & 1), warp * 16, lane);
    __syncthreads();
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
      dst[n * 8 + 2 * t4] = o[n][2 * r];
      dst[n * 8 + 2 * t4 + 1] = o[n][2 * r + 1];
    }
    if (t4 == 0) {
      dst[D] = m[r];
      dst[D + 1] = lsum;
    }
  }
  __syncthreads();
  const int h0 = hk * G;
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
    const int64_t qh = int64_t(s) * H + h0 + row;
    if (ws == nullptr) {  // one split in all: the result
      out[qh * D + d] = from_f32<TQ>(acc / lsum);
    } else {
      // Workspace: O [S*H, max_splits, D], then (m, l) [S*H, max_splits, 2].
      ws[(qh * gridDim.x + split) * D + d] = acc;
      if (d == 0) {
        float* ml = ws + int64_t(gridDim.z) * H * gridDim.x * D;
        ml[(qh * gridDim.x + split) * 2] = mx;
        ml[(qh * gridDim.x + split) * 2 + 1] = lsum;
      }
    }
  }
}

// grid (num_seqs, H), block D threads: merges sequence s's splits of head h.
template <class TQ>
__global__ void decode_reduce_kernel(const float* __restrict__ ws, int H, int D, int max_splits, int partition,
                                     int num_seqs, const int32_t* __restrict__ context_lens, TQ* __restrict__ out) {
  const int s = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int splits = (context_lens[s] + partition - 1) / partition;
  const int64_t qh = int64_t(s) * H + h;
  const float* ml = ws + int64_t(num_seqs) * H * max_splits * D + qh * max_splits * 2;
  float mx = -INFINITY;
  for (int i = 0; i < splits; ++i) mx = fmaxf(mx, ml[2 * i]);
  float acc = 0.f, lsum = 0.f;
  for (int i = 0; i < splits; ++i) {
    const float f = exp2f(ml[2 * i] - mx);
    acc += f * ws[(qh * max_splits + i) * D + d];
    lsum += f * ml[2 * i + 1];
  }
  out[qh * D + d] = from_f32<TQ>(acc / lsum);
}

template <int D, class T, class TQ>
void launch_decode(const void* q, int H, const PagedKVLayer& kv, const CudaAttentionBatch& batch, float scale,
                   void* out, void* workspace, cudaStream_t stream) {
  constexpr int smem = decode_smem_bytes<D, T>();
  static const bool attr_set = [] {
    VLM_CUDA_CHECK(cudaFuncSetAttribute(decode_split_kernel<D, T, TQ>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)attr_set;
  const DecodePlan plan = plan_decode(batch.num_seqs, kv.num_kv_heads, batch.max_context_len);
  float* ws = plan.max_splits > 1 ? static_cast<float*>(workspace) : nullptr;
  const dim3 grid(plan.max_splits, kv.num_kv_heads, batch.num_seqs);
  decode_split_kernel<D, T, TQ><<<grid, kThreads, smem, stream>>>(
      static_cast<const TQ*>(q), H, kv_view(kv), batch, scale * float(M_LOG2E), plan.partition, ws,
      static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
  if (ws == nullptr) return;
  decode_reduce_kernel<TQ><<<dim3(batch.num_seqs, H), D, 0, stream>>>(
      ws, H, D, plan.max_splits, plan.partition, batch.num_seqs, batch.context_lens, static_cast<TQ*>(out));
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t paged_decode_workspace_bytes(int num_seqs, int num_heads, int num_kv_heads, int head_dim,
                                    int max_context_len) {
  const DecodePlan plan = plan_decode(num_seqs, num_kv_heads, max_context_len);
  return size_t(num_seqs) * num_heads * plan.max_splits * (head_dim + 2) * sizeof(float);
}

void paged_decode_attention(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                            const CudaAttentionBatch& batch, float scale, void* out, void* workspace,
                            cudaStream_t stream) {
  VLM_CHECK(num_heads % kv.num_kv_heads == 0, "H {} not a multiple of Hkv {}", num_heads, kv.num_kv_heads);
  VLM_CHECK(num_heads / kv.num_kv_heads <= kRows, "decode attention: group {} > {}", num_heads / kv.num_kv_heads, kRows);
  VLM_CHECK(kv.head_dim == 64 || kv.head_dim == 128, "decode attention: D {} not 64/128", kv.head_dim);
  if (batch.num_seqs == 0) return;
  if (kv.dtype == DType::F32) {
    attention_f32(q, act, num_heads, kv, batch, scale, out, /*decode=*/true, stream);
    return;
  }
  dispatch_float_dtype(act, [&](auto a) {
    using TQ = ElemOf<decltype(a)>;
    const auto run = [&](auto c) {
      using T = ElemOf<decltype(c)>;
      if (kv.head_dim == 64) launch_decode<64, T, TQ>(q, num_heads, kv, batch, scale, out, workspace, stream);
      else launch_decode<128, T, TQ>(q, num_heads, kv, batch, scale, out, workspace, stream);
    };
    if (kv.dtype == DType::BF16) run(std::integral_constant<DType, DType::BF16>{});
    else run(std::integral_constant<DType, DType::F16>{});
  });
}

}  // namespace vlm::cuda
