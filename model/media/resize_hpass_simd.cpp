#include "model/media/resize_hpass_simd.h"

#include <cstring>

#if defined(__x86_64__)
#include "kernels/core/x86_intrinsics.h"
#endif

#include "kernels/core/check.h"
#include "model/media/image_preprocess.h"

namespace vlm {

#if defined(__x86_64__)

namespace {

constexpr int kLanes = kResizeTileRows * 3;  // 48 bytes an input column of the tile

// 8 int32 sums -> 8 bytes: >> kResizePrecisionBits, clamped to [0, 255] by the saturating packs.
__attribute__((target("avx2"))) inline void store8(__m256i acc, uint8_t* dst) {
  const __m256i v = _mm256_srai_epi32(acc, kResizePrecisionBits);
  const __m128i s16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(s16, s16));
}

__attribute__((target("avx2"))) inline __m256i widen8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace

__attribute__((target("avx2"))) void resize_hpass_tile_avx2(const uint8_t* const* rows, int nr, int in_w, int out_w,
                                                             const int32_t* first, const int32_t* count,
                                                             const int32_t* w, int ksize, uint8_t* const* out_rows,
                                                             uint8_t* tile) {
  VLM_CHECK(nr >= 1 && nr <= kResizeTileRows, "resize tile of {} rows", nr);
  // Transpose: tile[x][r * 3 + c]. 4-byte moves where the 4th byte lands in a slot written later
  // (the next row's, rows ascending) and is read within the row; 3-byte ones elsewhere.
  for (int r = 0; r < nr; ++r) {
    const uint8_t* src = rows[r];
    uint8_t* dst = tile + r * 3;
    const int wide = r < kResizeTileRows - 1 ? in_w - 1 : 0;
    int x = 0;
    for (; x < wide; ++x, src += 3, dst += kLanes) std::memcpy(dst, src, 4);
    for (; x < in_w; ++x, src += 3, dst += kLanes) std::memcpy(dst, src, 3);
  }
  uint8_t* otile = tile + static_cast<size_t>(in_w) * kLanes;  // [out_w, kLanes]: column xx's 48 results
  const __m256i half = _mm256_set1_epi32(1 << (kResizePrecisionBits - 1));
  for (int xx = 0; xx < out_w; ++xx) {
    __m256i a0 = half, a1 = half, a2 = half, a3 = half, a4 = half, a5 = half;
    const uint8_t* p = tile + static_cast<size_t>(first[xx]) * kLanes;
    const int32_t* k = w + static_cast<size_t>(xx) * ksize;
    for (int j = 0; j < count[xx]; ++j, p += kLanes) {
      const __m256i kk = _mm256_set1_epi32(k[j]);
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(widen8(p), kk));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(widen8(p + 8), kk));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(widen8(p + 16), kk));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(widen8(p + 24), kk));
      a4 = _mm256_add_epi32(a4, _mm256_mullo_epi32(widen8(p + 32), kk));
      a5 = _mm256_add_epi32(a5, _mm256_mullo_epi32(widen8(p + 40), kk));
    }
    uint8_t* o = otile + static_cast<size_t>(xx) * kLanes;
    store8(a0, o);
    store8(a1, o + 8);
    store8(a2, o + 16);
    store8(a3, o + 24);
    store8(a4, o + 32);
    store8(a5, o + 40);
  }
  // Back to rows: 4-byte moves but for each row's last pixel (the 4th byte is the next pixel's
  // first, written next; reading it stays inside otile).
  for (int r = 0; r < nr; ++r) {
    uint8_t* dst = out_rows[r];
    const uint8_t* src = otile + r * 3;
    int xx = 0;
    for (; xx < out_w - 1; ++xx, dst += 3, src += kLanes) std::memcpy(dst, src, 4);
    std::memcpy(dst, src, 3);
  }
}

#else

void resize_hpass_tile_avx2(const uint8_t* const*, int, int, int, const int32_t*, const int32_t*, const int32_t*, int,
                            uint8_t* const*, uint8_t*) {
  VLM_CHECK(false, "resize_hpass_tile_avx2 on a machine without x86-64");
}

#endif

}  // namespace vlm
