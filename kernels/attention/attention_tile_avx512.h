// Pieces of the AVX-512 tile kernels shared by the f32 tiles (attention_tile_avx512.cpp) and the
// bf16 dot-product tiles (attention_tile_bf16.cpp). Internal to kernels/attention; every function
// carries a target attribute and is only reached after a run-time CPU check.
#pragma once

#include "kernels/core/x86_intrinsics.h"

#include <algorithm>
#include <cstdint>

#include "kernels/attention/paged_attention_internal.h"

#define VLM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace vlm::attn {

inline __mmask16 head_mask(int left) {  // lanes of a 16-chunk with `left` elements remaining
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max(left, 0)) - 1);
}

// Byte addresses of the K and V rows of keys [k0, k0 + n) of kv head kvh (esize bytes per element),
// through the block-table row; krows[j] for n <= j < round_up(n, 16) repeat the last row.
inline void gather_kv_rows(const PagedKVLayer& kv, const int32_t* block_row, int kvh, int k0, int n,
                           int64_t esize, const uint8_t** krows /*[KT]*/, const uint8_t** vrows /*[KT]*/) {
  const int D = kv.head_dim;
  const int B = kv.block_size;
  const auto* kb = static_cast<const uint8_t*>(kv.k);
  const auto* vb = static_cast<const uint8_t*>(kv.v);
  for (int j = 0; j < n;) {  // one run of consecutive slots of one block at a time
    const int pos = k0 + j;
    const int run = std::min(n - j, B - pos % B);
    const int64_t elem = block_row[pos / B] * kv.block_stride() + kvh * kv.head_stride() +
                         static_cast<int64_t>(pos % B) * D;
    for (int r = 0; r < run; ++r, ++j) {
      krows[j] = kb + (elem + static_cast<int64_t>(r) * D) * esize;
      vrows[j] = vb + (elem + static_cast<int64_t>(r) * D) * esize;
    }
  }
  const int n16 = (n + 15) / 16 * 16;
  for (int j = n; j < n16; ++j) krows[j] = krows[n - 1];  // columns >= n are don't-care
}

// Transposes 16 registers of 16 32-bit elements (any bits: only moves): dst[x * ds + i] =
// element x of r[i]. Clobbers r.
VLM_AVX512 inline void transpose16_store(__m512* r, float* dst, int ds) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: interleave row pairs
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // per group of 4 rows: lane L of c[x] holds dim 4L + x
    const __m512* u = t + 4 * g;
    r[4 * g + 0] = _mm512_shuffle_ps(u[0], u[2], 0x44);
    r[4 * g + 1] = _mm512_shuffle_ps(u[0], u[2], 0xEE);
    r[4 * g + 2] = _mm512_shuffle_ps(u[1], u[3], 0x44);
    r[4 * g + 3] = _mm512_shuffle_ps(u[1], u[3], 0xEE);
  }
  for (int x = 0; x < 4; ++x) {  // gather the four groups' 128-bit lanes for dims x + 4i
    const __m512 a = _mm512_shuffle_f32x4(r[x], r[4 + x], 0x88);
    const __m512 b = _mm512_shuffle_f32x4(r[8 + x], r[12 + x], 0x88);
    const __m512 c = _mm512_shuffle_f32x4(r[x], r[4 + x], 0xDD);
    const __m512 e = _mm512_shuffle_f32x4(r[8 + x], r[12 + x], 0xDD);
    _mm512_storeu_ps(dst + (x + 0) * ds, _mm512_shuffle_f32x4(a, b, 0x88));
    _mm512_storeu_ps(dst + (x + 8) * ds, _mm512_shuffle_f32x4(a, b, 0xDD));
    _mm512_storeu_ps(dst + (x + 4) * ds, _mm512_shuffle_f32x4(c, e, 0x88));
    _mm512_storeu_ps(dst + (x + 12) * ds, _mm512_shuffle_f32x4(c, e, 0xDD));
  }
}

// TileOps::softmax of the AVX-512 tiles (f32 scores), shared by both.
void softmax_avx512(float* s /*[M,KT]*/, const int* nvalid /*[M]*/, int M, int Dp, float* m_run /*[M]*/,
                    float* l_run /*[M,kSumLanes]*/, float* acc /*[M,Dp]*/);

}  // namespace vlm::attn
