// FP8 K/V tiles for the mma.sync attention kernels (decode_attention.cu, prefill_attention.cu) over
// an F8_E4M3 cache (paged_kv.h's convention): a tile's E4M3 rows are copied with cp.async into
// plain byte tiles [ROWS][D] (half the bytes of a 16-bit tile: the same shared memory holds two
// byte stages and one converted tile as two 16-bit stages), then converted in shared memory into
// the swizzled bf16 tiles the mma fragments read. E4M3 values are exact in bf16, so the tiles hold
// exactly the stored values; the per-head scales stay outside them: K's multiplies the softmax
// scale, V's the output rows (linear in V).
// The register form (decode v2, below: load_kv_tile_fp8_swz, qk_tile_fp8, pv_tile_fp8) keeps the
// byte tiles swizzled and builds the f16 mma fragments straight from them (E4M3 -> f16 is exact:
// one cvt.rn.f16x2.e4m3x2 per two values on sm_89+), with no converted tile and no barrier for it.
// Decode v3 (load_kv_tile_fp8_blocks) fills the same tiles, its block-table reads a tile ahead.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"

namespace vlm::cuda::tile {

// load_kv_tile for an F8_E4M3 cache: keys [key0, key0 + ROWS) of KV head h into the byte tiles
// sk, sv [ROWS][D] (row-major, no swizzle), keys at or beyond key_end zero-filled (E4M3 0).
// 16-byte copies (16 elements): D % 16 == 0.
template <int D>
struct ByteRows {
  __device__ static int at(int row, int col) { return row * D + col; }
};
template <int ROWS, int D, int NT, int UNROLL = 2>
__device__ __forceinline__ void load_kv_tile_fp8(const KVView& kv, const int32_t* table, int h, int key0, int key_end,
                                                 uint8_t* sk, uint8_t* sv, int tid) {
  load_kv_tile<ROWS, D, NT, uint8_t, ByteRows<D>, UNROLL>(kv, table, h, key0, key_end, sk, sv, tid);
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

// ---- The register form (decode attention v2; f16 mma) ----
// Byte tiles [ROWS][D] (D = 64 or 128): the 16-byte chunk c of row r is stored at chunk
// c ^ fp8_swz_key<D>(r), so the fragment loads below fall in distinct banks (D = 128; D = 64:
// K's loads conflict-free, V's 2-way). fp8_swz<D>(r, c): the chunk's byte offset in the tile.
template <int D>
__device__ __forceinline__ int fp8_swz(int r, int c) {
  static_assert(D == 64 || D == 128, "fp8 register tiles: D = 64 or 128");
  const int key = D == 128 ? (r & 7) : ((r >> 1) & 3);
  return r * D + ((c ^ key) << 4);
}

// load_kv_tile_fp8 into the swizzled byte tiles sk, sv [ROWS][D] (fp8_swz).
template <int D>
struct Fp8SwizzledRows {
  __device__ static int at(int row, int col) { return fp8_swz<D>(row, col / 16); }
};
template <int ROWS, int D, int NT, int UNROLL = 2>
__device__ __forceinline__ void load_kv_tile_fp8_swz(const KVView& kv, const int32_t* table, int h, int key0,
                                                     int key_end, uint8_t* sk, uint8_t* sv, int tid) {
  load_kv_tile<ROWS, D, NT, uint8_t, Fp8SwizzledRows<D>, UNROLL>(kv, table, h, key0, key_end, sk, sv, tid);
}

// v3's loads (decode attention, kKvFp8Reg3): the same swizzled byte tiles as load_kv_tile_fp8_swz,
// in two steps so that a tile's block-table entries are read one tile before its copies (the
// entries' L1/L2 round trip then overlaps a tile's compute instead of stalling the warp before
// it). Thread tid copies the 16-byte chunks tid + j * NT (j < kIters) of the tile's ROWS x D / 16.
template <int ROWS, int D, int NT>
struct Fp8TileChunks {
  static constexpr int kChunks = D / 16;  // 16-byte chunks of a row
  static constexpr int kIters = ROWS * kChunks / NT;
  static_assert(ROWS * kChunks % NT == 0, "every thread copies the same number of chunks");
};
// blk[j]: the cache block of the key of this thread's chunk j of the tile at key0 (0 past key_end).
template <int ROWS, int D, int NT>
__device__ __forceinline__ void fp8_tile_blocks(const KVView& kv, const int32_t* table, int key0, int key_end, int tid,
                                                int32_t (&blk)[Fp8TileChunks<ROWS, D, NT>::kIters]) {
  using C = Fp8TileChunks<ROWS, D, NT>;
#pragma unroll
  for (int j = 0; j < C::kIters; ++j) {
    const int key = key0 + (tid + j * NT) / C::kChunks;
    blk[j] = key < key_end ? table[key >> kv.block_shift] : 0;
  }
}
// The copies of the tile at key0 of KV head h into the swizzled byte tiles sk, sv [ROWS][D]
// (fp8_swz), its blocks from fp8_tile_blocks; keys at or beyond key_end zero-filled.
template <int ROWS, int D, int NT>
__device__ __forceinline__ void load_kv_tile_fp8_blocks(const KVView& kv, const int32_t (&blk)[Fp8TileChunks<ROWS, D, NT>::kIters],
                                                        int h, int key0, int key_end, uint8_t* sk, uint8_t* sv,
                                                        int tid) {
  using C = Fp8TileChunks<ROWS, D, NT>;
  const uint8_t* kbase = static_cast<const uint8_t*>(kv.k);
  const uint8_t* vbase = static_cast<const uint8_t*>(kv.v);
#pragma unroll
  for (int j = 0; j < C::kIters; ++j) {
    const int i = tid + j * NT, r = i / C::kChunks, c = i % C::kChunks;
    const int key = key0 + r;
    const bool in = key < key_end;
    const int64_t off = in ? kv.offset(blk[j], h, key & (kv.block_size - 1)) + c * 16 : 0;
    const int dst = fp8_swz<D>(r, c);
    cp_async16(sk + dst, kbase + off, in ? 16 : 0);
    cp_async16(sv + dst, vbase + off, in ? 16 : 0);
  }
}

// Two E4M3 values (the low 16 bits of x; the low byte first) -> f16x2 (the first in the low
// half). Exact: every E4M3 value is an f16.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}

// The register form's order of the head dimension in QK^T (a sum over d, so any order taken by
// both Q and K gives the same S): lane (g, t) of an m16n8k16 step kk holds the logical columns
// 2t, 2t+1 (a0/b0) and 2t+8, 2t+9 (a2/b1); they are the physical columns t*D/4 + 4kk + {0,1} and
// {2,3}, so a lane reads K's D/4 contiguous bytes t*D/4.. of its key and one u32 per step.
// Q's A fragments (qf, f16) must be built in that order (decode_attention.cu).
// S[16 x 16] += Q K^T for one warp: keys key_base + 8n + g of the swizzled byte tile sk.
template <int D>
__device__ __forceinline__ void qk_tile_fp8(float (&s)[2][4], const uint32_t (&qf)[D / 16][4], const uint8_t* sk,
                                            int key_base, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const int r = key_base + n * 8 + g;
    uint32_t w[D / 16];  // w[kk]: physical columns t*D/4 + 4kk .. + 3
#pragma unroll
    for (int c = 0; c < D / 64; ++c) {
      const uint4 v = *reinterpret_cast<const uint4*>(sk + fp8_swz<D>(r, t * (D / 64) + c));
      w[4 * c] = v.x;
      w[4 * c + 1] = v.y;
      w[4 * c + 2] = v.z;
      w[4 * c + 3] = v.w;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) mma<__half>(s[n], qf[kk], e4m3x2_to_f16x2(w[kk]), e4m3x2_to_f16x2(w[kk] >> 16));
  }
}

// O[16 x D] += P[16 x 16] V[16 x D] for one warp: P from the S fragments of qk_tile_fp8
// (exponentiated), V rows key_base.. of the swizzled byte tile sv. The register form's order of
// the output columns: column j of the mma's 8-column tile n is head dimension j*D/8 + n (lane g
// reads V's D/8 contiguous bytes g*D/8.. of rows 2t, 2t+1, 2t+8, 2t+9; two rows' bytes are
// interleaved by one prmt into the b fragments' pairs). So o[n][e] of lane (g, t) is row
// g + 8 (e / 2), column (2t + e % 2) * D/8 + n.
template <int D>
__device__ __forceinline__ void pv_tile_fp8(float (&o)[D / 8][4], const float (&p)[2][4], const uint8_t* sv,
                                            int key_base, int lane) {
  const int g = lane / 4, t = lane % 4;
  const uint32_t a[4] = {pack2<__half>(p[0][0], p[0][1]), pack2<__half>(p[0][2], p[0][3]),
                         pack2<__half>(p[1][0], p[1][1]), pack2<__half>(p[1][2], p[1][3])};
  constexpr int kW = D / 32;  // u32 words of a row's D/8 bytes
  uint32_t rw[4][kW];         // rows 2t, 2t+1, 2t+8, 2t+9
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = key_base + 2 * t + (i & 1) + (i >> 1) * 8;
    if constexpr (D == 128) {
      const uint4 v = *reinterpret_cast<const uint4*>(sv + fp8_swz<D>(r, g));
      rw[i][0] = v.x;
      rw[i][1] = v.y;
      rw[i][2] = v.z;
      rw[i][3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(sv + fp8_swz<D>(r, g / 2) + (g % 2) * 8);
      rw[i][0] = v.x;
      rw[i][1] = v.y;
    }
  }
#pragma unroll
  for (int wi = 0; wi < kW; ++wi) {
    // Bytes j of rows 2t and 2t+1 (and 2t+8, 2t+9) side by side: the pair of output tile 4wi + j.
    const uint32_t lo = __byte_perm(rw[0][wi], rw[1][wi], 0x5140), hi = __byte_perm(rw[0][wi], rw[1][wi], 0x7362);
    const uint32_t lo8 = __byte_perm(rw[2][wi], rw[3][wi], 0x5140), hi8 = __byte_perm(rw[2][wi], rw[3][wi], 0x7362);
    mma<__half>(o[4 * wi], a, e4m3x2_to_f16x2(lo), e4m3x2_to_f16x2(lo8));
    mma<__half>(o[4 * wi + 1], a, e4m3x2_to_f16x2(lo >> 16), e4m3x2_to_f16x2(lo8 >> 16));
    mma<__half>(o[4 * wi + 2], a, e4m3x2_to_f16x2(hi), e4m3x2_to_f16x2(hi8));
    mma<__half>(o[4 * wi + 3], a, e4m3x2_to_f16x2(hi >> 16), e4m3x2_to_f16x2(hi8 >> 16));
  }
}

// Decode v4's V side: E4M3 -> f16 by integer ops instead of the conversion unit (the bit layout
// of an E4M3 value s eeee mmm, moved into an f16's s 0eeee mmm0000000, is the same value times
// 2^(7 - 15) = 2^-8 for every E4M3 value, subnormals included, NaN aside: the cache holds none).
// x's bytes 1 and 3 (odd) / 0 and 2 (even) -> f16x2 of their values times 2^-8 (byte 1 / 0 low).
__device__ __forceinline__ uint32_t e4m3_odd_to_f16x2_scaled(uint32_t x) {
  return (x & 0x80008000u) | ((x & 0x7f007f00u) >> 1);
}
__device__ __forceinline__ uint32_t e4m3_even_to_f16x2_scaled(uint32_t x) { return e4m3_odd_to_f16x2_scaled(x << 8); }

// pv_tile_fp8 with V converted by e4m3_*_to_f16x2_scaled: O += P V * 2^-8 (the caller multiplies
// the output by 2^8, with V's scale), the same fragments' order. Per word pair of rows 2t, 2t+1 one
// prmt puts bytes j, j+1 of row 2t in the low half and of row 2t+1 in the high half, so its even
// and odd bytes are the b fragments (rows 2t, 2t+1) of output tiles 4wi + j and 4wi + j + 1.
template <int D>
__device__ __forceinline__ void pv_tile_fp8_alu(float (&o)[D / 8][4], const float (&p)[2][4], const uint8_t* sv,
                                                int key_base, int lane) {
  const int g = lane / 4, t = lane % 4;
  const uint32_t a[4] = {pack2<__half>(p[0][0], p[0][1]), pack2<__half>(p[0][2], p[0][3]),
                         pack2<__half>(p[1][0], p[1][1]), pack2<__half>(p[1][2], p[1][3])};
  constexpr int kW = D / 32;  // u32 words of a row's D/8 bytes
  uint32_t rw[4][kW];         // rows 2t, 2t+1, 2t+8, 2t+9
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = key_base + 2 * t + (i & 1) + (i >> 1) * 8;
    if constexpr (D == 128) {
      const uint4 v = *reinterpret_cast<const uint4*>(sv + fp8_swz<D>(r, g));
      rw[i][0] = v.x;
      rw[i][1] = v.y;
      rw[i][2] = v.z;
      rw[i][3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(sv + fp8_swz<D>(r, g / 2) + (g % 2) * 8);
      rw[i][0] = v.x;
      rw[i][1] = v.y;
    }
  }
#pragma unroll
  for (int wi = 0; wi < kW; ++wi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // bytes 2h, 2h + 1 of the word: output tiles 4wi + 2h, + 1
      const uint32_t sel = h == 0 ? 0x5410u : 0x7632u;
      const uint32_t x = __byte_perm(rw[0][wi], rw[1][wi], sel), x8 = __byte_perm(rw[2][wi], rw[3][wi], sel);
      mma<__half>(o[4 * wi + 2 * h], a, e4m3_even_to_f16x2_scaled(x), e4m3_even_to_f16x2_scaled(x8));
      mma<__half>(o[4 * wi + 2 * h + 1], a, e4m3_odd_to_f16x2_scaled(x), e4m3_odd_to_f16x2_scaled(x8));
    }
  }
}

}  // namespace vlm::cuda::tile
