// Paged KV write: one thread per 8 elements of a (token, KV head) row: one 16- or 32-byte load of
// k and v each, converted, one vector store into the token's slot. rope_split_q_kv_write: the
// same store fed by the RoPE split of the fused q/k/v projection (rope_rows.cuh). An F8_E4M3
// cache: the 8 elements quantized under the head's scale, one 8-byte store.
#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/core/pdl.cuh"
#include "kernels/cuda/ops/rope_rows.cuh"

namespace vlm::cuda {
namespace {

template <class TIn, class TOut>
__device__ __forceinline__ void copy8(const TIn* src, TOut* dst) {
  struct alignas(8 * sizeof(TIn)) In { TIn x[8]; };
  struct alignas(8 * sizeof(TOut)) Out { TOut x[8]; };
  const In a = *reinterpret_cast<const In*>(src);
  Out b;
#pragma unroll
  for (int i = 0; i < 8; ++i) b.x[i] = from_f32<TOut>(to_f32(a.x[i]));
  *reinterpret_cast<Out*>(dst) = b;
}

template <class TIn, class TOut>
__global__ void kv_write_kernel(KVView kv, const TIn* __restrict__ k, const TIn* __restrict__ v,
                                const int32_t* __restrict__ slots, int64_t T) {
  const int D8 = kv.head_dim / 8;
  const int64_t n = T * kv.num_kv_heads * D8;  // 8-element chunks
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / D8;  // t * Hkv + h
  const int64_t t = row / kv.num_kv_heads;
  const int h = int(row % kv.num_kv_heads), c = int(i % D8);
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t dst = kv.offset(slot / kv.block_size, h, slot % kv.block_size) + c * 8;
  copy8(k + i * 8, static_cast<TOut*>(kv.k) + dst);
  copy8(v + i * 8, static_cast<TOut*>(kv.v) + dst);
}

// kv_write_kernel for an F8_E4M3 cache: x * (1 / scale[h]) to E4M3 (fp8_kv_store).
template <class TIn>
__global__ void kv_write_fp8_kernel(KVView kv, const TIn* __restrict__ k, const TIn* __restrict__ v,
                                    const int32_t* __restrict__ slots, int64_t T) {
  const int D8 = kv.head_dim / 8;
  const int64_t n = T * kv.num_kv_heads * D8;
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / D8;
  const int64_t t = row / kv.num_kv_heads;
  const int h = int(row % kv.num_kv_heads), c = int(i % D8);
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t dst = kv.offset(slot / kv.block_size, h, slot % kv.block_size) + c * 8;
  const float inv[2] = {1.f / kv.k_scale[h], 1.f / kv.v_scale[h]};
  const TIn* src[2] = {k + i * 8, v + i * 8};
  void* base[2] = {kv.k, kv.v};
#pragma unroll
  for (int kvi = 0; kvi < 2; ++kvi) {
    struct alignas(8 * sizeof(TIn)) In { TIn x[8]; };
    const In a = *reinterpret_cast<const In*>(src[kvi]);
    uint32_t w[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e / 4] |= uint32_t(fp8_kv_store(to_f32(a.x[e]), inv[kvi])) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(base[kvi]) + dst) = make_uint2(w[0], w[1]);
  }
}

// One thread per 8 elements of a (token, head) row of qkv, heads [0, H) q, then Hkv of k and of v
// (rope_split_x8_kernel's indexing): q rows to q, k/v rows to their cache slot. With norm.q_w, the
// q and k heads are first normalized (Qwen3's q/k RMSNorm, rope_rows.cuh's head norm): every
// thread takes part in its head's sum before any returns. kFp8: the k/v rows quantized into an
// F8_E4M3 cache (the bytes kv_write_fp8_kernel writes from the same bf16/f16 rows). PDL (pdl.cuh):
// waits first, triggers at once (decode attention, next, then launches beside it).
template <class T, bool kFp8>
__global__ void rope_kv_write_kernel(const T* __restrict__ qkv, int64_t T_, int H, const float* __restrict__ table,
                                     int R, T* __restrict__ q, KVView kv, const int32_t* __restrict__ slots,
                                     HeadNorm norm) {
  pdl_wait();
  pdl_trigger();
  const int D = kv.head_dim, Hkv = kv.num_kv_heads;
  const RopeChunk ch = rope_chunk(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, T_, H, Hkv, D);
  const int64_t t = ch.t;
  const int h = ch.h, i = ch.i;
  const T* x = qkv + (t * (H + 2 * Hkv) + h) * D;
  const float* w = nullptr;
  float inv = 0.0f;
  if (norm.q_w) {  // uniform over the launch: every lane reaches head_sum
    inv = head_inv_rms(head_sum(ch.valid ? sum_sq8(x + i) : 0.0f, D / 8), D, norm.eps);
    if (h < H + Hkv) w = h < H ? norm.q_w : norm.k_w;
  }
  if (!ch.valid) return;
  const int half = h < H + Hkv ? R / 2 : 0;  // v: no rotation
  if (h < H) {
    *reinterpret_cast<uint4*>(q + (t * H + h) * D + i) = rope8(x, i, half, table + t * R, w, inv);
    return;
  }
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const bool is_k = h < H + Hkv;
  const int hk = is_k ? h - H : h - H - Hkv;
  const int64_t off = kv.offset(slot / kv.block_size, hk, slot % kv.block_size) + i;
  const uint4 r = rope8(x, i, half, table + t * R, w, inv);
  if constexpr (kFp8) {
    const float inv_scale = 1.f / (is_k ? kv.k_scale : kv.v_scale)[hk];
    const T* e8 = reinterpret_cast<const T*>(&r);
    uint32_t b[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) b[e / 4] |= uint32_t(fp8_kv_store(to_f32(e8[e]), inv_scale)) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(is_k ? kv.k : kv.v) + off) = make_uint2(b[0], b[1]);
  } else {
    *reinterpret_cast<uint4*>(static_cast<T*>(is_k ? kv.k : kv.v) + off) = r;
  }
}

}  // namespace

bool rope_kv_write_supported(const PagedKVLayer& kv, DType act, int64_t R) {
  return (act == DType::BF16 || act == DType::F16) && (kv.dtype == act || kv.dtype == DType::F8_E4M3) &&
         kv.head_dim % 8 == 0 && (R / 2) % 8 == 0 && R <= kv.head_dim;
}

bool rope_kv_write_norm_supported(int64_t head_dim) { return head_norm_x8_supported(head_dim); }

void rope_split_q_kv_write(const void* qkv, int64_t T, int64_t H, const float* table, int64_t R, void* q,
                           const PagedKVLayer& kv, const int32_t* slot_mapping, DType act, cudaStream_t stream,
                           const HeadNorm& norm) {
  VLM_CHECK(rope_kv_write_supported(kv, act, R), "rope_split_q_kv_write: act {} cache {} D {} R {}", dtype_name(act),
            dtype_name(kv.dtype), kv.head_dim, R);
  VLM_CHECK(!norm.q_w || (norm.k_w && head_norm_x8_supported(kv.head_dim)),
            "rope_split_q_kv_write: a q/k norm over heads of {} (needs both weights and D / 8 a power of two <= 32)",
            kv.head_dim);
  if (kv.dtype == DType::F8_E4M3) check_fp8_cache(kv, "rope_split_q_kv_write");
  if (T == 0) return;
  const int64_t n = T * (H + 2 * kv.num_kv_heads) * kv.head_dim / 8;
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  const bool fp8 = kv.dtype == DType::F8_E4M3;
  auto run = [&](auto tag) {
    using E = decltype(tag);
    if (fp8)
      launch_pdl(rope_kv_write_kernel<E, true>, blocks, 256, 0, stream, static_cast<const E*>(qkv), T,
                 static_cast<int>(H), table, static_cast<int>(R), static_cast<E*>(q), kv_view(kv), slot_mapping, norm);
    else
      launch_pdl(rope_kv_write_kernel<E, false>, blocks, 256, 0, stream, static_cast<const E*>(qkv), T,
                 static_cast<int>(H), table, static_cast<int>(R), static_cast<E*>(q), kv_view(kv), slot_mapping, norm);
  };
  if (act == DType::BF16) run(__nv_bfloat16{});
  else run(__half{});
}

void paged_kv_write(const PagedKVLayer& kv, const void* k, const void* v, DType act,
                    const int32_t* slot_mapping, int64_t T, cudaStream_t stream) {
  VLM_CHECK(kv.head_dim % 8 == 0, "paged_kv_write: D {} not a multiple of 8", kv.head_dim);
  if (T == 0) return;
  const int64_t chunks = T * kv.num_kv_heads * (kv.head_dim / 8);
  const int threads = 256;
  const unsigned blocks = unsigned((chunks + threads - 1) / threads);
  if (kv.dtype == DType::F8_E4M3) {
    check_fp8_cache(kv, "paged_kv_write");
    dispatch_float(act, [&](auto a) {
      using TIn = decltype(a);
      kv_write_fp8_kernel<TIn><<<blocks, threads, 0, stream>>>(kv_view(kv), static_cast<const TIn*>(k),
                                                                static_cast<const TIn*>(v), slot_mapping, T);
    });
    VLM_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float(act, [&](auto a) {
    dispatch_float(kv.dtype, [&](auto c) {
      using TIn = decltype(a);
      using TOut = decltype(c);
      kv_write_kernel<TIn, TOut><<<blocks, threads, 0, stream>>>(
          kv_view(kv), static_cast<const TIn*>(k), static_cast<const TIn*>(v), slot_mapping, T);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
