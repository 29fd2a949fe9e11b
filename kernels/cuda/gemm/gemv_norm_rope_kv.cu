#include "kernels/cuda/gemm/gemv_norm_rope_kv.h"

#include <algorithm>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/gemm/gemv_norm_stage.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/ops/rope_rows.cuh"

namespace vlm::cuda {

namespace {

using namespace gemv_detail;

constexpr int kMaxHeadDim = 256;  // the head's M rows staged in shared memory by the epilogue

// What the epilogue needs beyond the GEMV's arguments.
struct RopeKvArgs {
  int H;                 // query heads; then Hkv k heads and Hkv v heads (kv.num_kv_heads)
  const float* table;    // [M, R] f32: cos | sin of each row
  int R;
  KVView kv;
  const int32_t* slots;  // [M]
  HeadNorm norm;
  int32_t* counters;     // [H + 2 Hkv]
};

// Head `head` of the M rows of the stored qkv [M, N] (read back through L2: other blocks wrote
// most of it in this launch), then rope_kv_write_kernel's work on it (paged_kv_write.cu: the same
// lanes, sums and roundings): thread tid takes row tid / (D / 8), elements (tid % (D / 8)) * 8.
// Every thread of the block calls it (head_sum's shuffles; a barrier inside).
template <class T, int M, bool kFp8>
__device__ __forceinline__ void head_epilogue(const T* qkv, int N, int head, T* __restrict__ q, const RopeKvArgs& a,
                                              T (*rows)[kMaxHeadDim]) {
  const int D = a.kv.head_dim, D8 = D / 8, H = a.H, Hkv = a.kv.num_kv_heads;
  const int tid = threadIdx.x, m = tid / D8, i = (tid % D8) * 8;
  const bool valid = m < M;  // M D / 8 <= 128 < kThreads
  if (valid)
    *reinterpret_cast<uint4*>(&rows[m][i]) =
        __ldcg(reinterpret_cast<const uint4*>(qkv + int64_t(m) * N + int64_t(head) * D + i));
  __syncthreads();
  const T* x = rows[valid ? m : 0];
  const float* w = nullptr;
  float inv = 0.0f;
  if (a.norm.q_w) {  // uniform over the block: every lane reaches head_sum
    inv = head_inv_rms(head_sum(valid ? sum_sq8(x + i) : 0.0f, D8), D, a.norm.eps);
    if (head < H + Hkv) w = head < H ? a.norm.q_w : a.norm.k_w;
  }
  if (!valid) return;
  const int half = head < H + Hkv ? a.R / 2 : 0;  // v: no rotation
  const float* cs = a.table + int64_t(m) * a.R;
  if (head < H) {
    *reinterpret_cast<uint4*>(q + (int64_t(m) * H + head) * D + i) = rope8(x, i, half, cs, w, inv);
    return;
  }
  const int32_t slot = a.slots[m];
  if (slot < 0) return;
  const bool is_k = head < H + Hkv;
  const int hk = is_k ? head - H : head - H - Hkv;
  const int64_t off = a.kv.offset(slot / a.kv.block_size, hk, slot % a.kv.block_size) + i;
  const uint4 r = rope8(x, i, half, cs, w, inv);
  if constexpr (kFp8) {
    const float inv_scale = 1.f / (is_k ? a.kv.k_scale : a.kv.v_scale)[hk];
    const T* e8 = reinterpret_cast<const T*>(&r);
    uint32_t b[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) b[e / 4] |= uint32_t(fp8_kv_store(to_f32(e8[e]), inv_scale)) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(is_k ? a.kv.k : a.kv.v) + off) = make_uint2(b[0], b[1]);
  } else {
    *reinterpret_cast<uint4*>(static_cast<T*>(is_k ? a.kv.k : a.kv.v) + off) = r;
  }
}

// gemv_norm_kernel (gemv_norm.cu) with y = qkv, no accumulate, N % kWarps == 0 (every warp has a
// column), then per column group: the block's stores fenced, one arrival on its head's counter;
// the block that brings a head to D / kWarps arrivals resets the counter and runs head_epilogue.
template <class T, int M, bool kFp8>
__global__ void __launch_bounds__(kThreads)
gemv_norm_rope_kv_kernel(const float* __restrict__ x, const float* __restrict__ nw, float eps, const T* __restrict__ w,
                         const T* __restrict__ bias, T* qkv, int N, int K, int prefetch, T* __restrict__ q,
                         RopeKvArgs a) {
  extern __shared__ __align__(16) unsigned char staged[];
  T* xs = reinterpret_cast<T*>(staged);  // [M, K] dt, the normalized rows
  __shared__ __align__(16) T rows[M][kMaxHeadDim];
  __shared__ int last;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, K8 = K / 8, groups = N / kWarps;
  const int per_head = a.kv.head_dim / kWarps;
  if (const int n0 = blockIdx.x * kWarps + warp; n0 < N)
    prefetch_head(reinterpret_cast<const uint4*>(w) + int64_t(n0) * K8, K8, lane, prefetch);
  pdl_wait();
  stage_normalized<T, M>(x, nullptr, nw, eps, K, xs);
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {  // uniform over the block
    const int n = grp * kWarps + warp;
    const uint4* wr[1] = {reinterpret_cast<const uint4*>(w) + int64_t(n) * K8};
    float acc[1][M];
    warp_dot<T, M, 1, true>(reinterpret_cast<const uint4*>(xs), wr, K8, lane, acc);
    store_column<T, M>(acc, lane, bias, false, qkv, N, n);
    __threadfence();  // this block's columns visible device-wide before its arrival
    __syncthreads();
    const int head = grp / per_head;
    if (threadIdx.x == 0) {
      last = atomicAdd(a.counters + head, 1) == per_head - 1;
      if (last) a.counters[head] = 0;  // every arrival of this launch is in: ready for the next call
    }
    __syncthreads();
    if (last) {
      __threadfence();
      head_epilogue<T, M, kFp8>(qkv, N, head, q, a, rows);
    }
  }
  pdl_trigger();
}

}  // namespace

bool gemv_norm_rope_kv_supported(int64_t M, int64_t K, DType dt, const PagedKVLayer& kv, int64_t R, bool head_norm) {
  return gemv_norm_supported(M, K, dt) && rope_kv_write_supported(kv, dt, R) && kv.head_dim % kWarps == 0 &&
         kv.head_dim <= kMaxHeadDim && (!head_norm || head_norm_x8_supported(kv.head_dim));
}

void gemv_norm_rope_kv(const float* x, const float* norm_w, float eps, const void* w, DType dt, const void* bias,
                       void* qkv, int64_t M, int64_t K, int64_t H, const float* table, int64_t R, void* q,
                       const PagedKVLayer& kv, const int32_t* slot_mapping, const HeadNorm& head_norm,
                       int32_t* counters, cudaStream_t s) {
  VLM_CHECK(gemv_norm_rope_kv_supported(M, K, dt, kv, R, head_norm.q_w != nullptr),
            "gemv_norm_rope_kv: M {} K {} {} cache {} D {} R {}{}", M, K, dtype_name(dt), dtype_name(kv.dtype),
            kv.head_dim, R, head_norm.q_w ? " with the q/k norm" : "");
  VLM_CHECK(!head_norm.q_w || head_norm.k_w, "gemv_norm_rope_kv: a q norm without a k norm");
  VLM_CHECK(counters != nullptr && H >= 1, "gemv_norm_rope_kv: counters and H >= 1");
  if (kv.dtype == DType::F8_E4M3) check_fp8_cache(kv, "gemv_norm_rope_kv");
  const int64_t N = (H + 2 * kv.num_kv_heads) * kv.head_dim;
  const size_t smem = static_cast<size_t>(M * K) * dtype_size(dt);
  const int64_t groups = N / kWarps;
  RopeKvArgs a{static_cast<int>(H), table, static_cast<int>(R), kv_view(kv), slot_mapping, head_norm, counters};
  dispatch_half(dt, [&](auto t) {
    using T = decltype(t);
    const int64_t row_bytes = K * int64_t(sizeof(T));
    dispatch_rows(M, [&](auto r) {
      constexpr int Rows = decltype(r)::value;
      auto go = [&](auto kernel) {
        const unsigned grid = grid_for(reinterpret_cast<const void*>(kernel), smem, groups);
        launch_pdl(kernel, grid, kThreads, smem, s, x, norm_w, eps, static_cast<const T*>(w),
                   static_cast<const T*>(bias), static_cast<T*>(qkv), static_cast<int>(N), static_cast<int>(K),
                   head_prefetch(std::min<int64_t>(N, int64_t(grid) * kWarps), row_bytes), static_cast<T*>(q), a);
      };
      if (kv.dtype == DType::F8_E4M3) go(gemv_norm_rope_kv_kernel<T, Rows, true>);
      else go(gemv_norm_rope_kv_kernel<T, Rows, false>);
    });
  });
}

}  // namespace vlm::cuda
