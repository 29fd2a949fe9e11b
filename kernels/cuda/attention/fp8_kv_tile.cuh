// FP8 K/V tiles for the mma.sync attention kernels (decode_attention.cu, prefill_attention.cu) over
// an F8_E4M3 cache (paged_kv.h's convention): a tile's E4M3 rows are copied with cp.async into
// plain byte tiles [ROWS][D] (half the bytes of a 16-bit tile: the same shared memory holds two
// byte stages and one converted tile as two 16-bit stages), then converted in shared memory into
// the swizzled bf16 tiles the mma fragments read. E4M3 values are exact in bf16, so the tiles hold
// exactly the stored values; the per-head scales stay outside them: K's multiplies the softmax
// scale, V's the output rows (linear in V).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"

namespace vlm::cuda::tile {

// load_kv_tile for an F8_E4M3 cache: keys [key0, key0 + ROWS) of KV head h into the byte tiles
// sk, sv [ROWS][D] (row-major, no swizzle), keys at or beyond key_end zero-filled (E4M3 0).
// 16-byte copies (16 elements): D % 16 == 0.
template <int ROWS, int D, int NT, int UNROLL = 2>
__device__ __forceinline__ void load_kv_tile_fp8(const KVView& kv, const int32_t* table, int h, int key0, int key_end,
                                                 uint8_t* sk, uint8_t* sv, int tid) {
  constexpr int kChunks = D / 16;
  const uint8_t* kbase = static_cast<const uint8_t*>(kv.k);
  const uint8_t* vbase = static_cast<const uint8_t*>(kv.v);
#pragma unroll UNROLL
  for (int i = tid; i < ROWS * kChunks; i += NT) {
    const int r = i / kChunks, c = i % kChunks;
    const int key = key0 + r;
    int64_t off = 0;
    int bytes = 0;
    if (key < key_end) {
      off = kv.token_offset(table, h, key) + c * 16;
      bytes = 16;
    }
    cp_async16(sk + r * D + c * 16, kbase + off, bytes);
    cp_async16(sv + r * D + c * 16, vbase + off, bytes);
  }
}

// Converts a byte tile src [ROWS][D] (E4M3) into the swizzled 16-bit tile dst [ROWS][D] (T: the
// mma's element type; bf16 holds every E4M3 value exactly). NT threads share the work; the caller
// synchronizes before and after.
template <int ROWS, int D, int NT, class T>
__device__ __forceinline__ void convert_fp8_tile(const uint8_t* src, T* dst, int tid) {
  constexpr int kChunks = D / 16;
#pragma unroll 2
  for (int i = tid; i < ROWS * kChunks; i += NT) {
    const int r = i / kChunks, c = i % kChunks;
    const uint4 raw = *reinterpret_cast<const uint4*>(src + r * D + c * 16);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t o[8];  // o[j]: elements 2j, 2j + 1 (the low byte of a pair is its first element)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>((w[j / 2] >> (16 * (j % 2))) & 0xffffu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      o[j] = pack2<T>(f.x, f.y);
    }
    *reinterpret_cast<uint4*>(dst + swz<D>(r, c * 16)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4*>(dst + swz<D>(r, c * 16 + 8)) = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

}  // namespace vlm::cuda::tile
