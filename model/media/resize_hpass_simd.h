// The horizontal pass of resize_bicubic (model/media/image_preprocess.h) over one tile of up to
// kResizeTileRows input rows, with AVX2 intrinsics (x86-64 only; callers check
// cpu_has_avx2_fma()). The tile is first transposed to tile[x][r * 3 + c] so that an output
// column is a sum over taps of 48 contiguous bytes (16 rows x 3 channels), computed in int32
// lanes exactly as the scalar pass does: (1 << (kResizePrecisionBits - 1)) + sum in * w, shifted
// right by kResizePrecisionBits and clamped to [0, 255] (through the saturating packs: the same
// values). The same bytes as resize_bicubic_ref (tests/model/media/test_qwen2vl_preprocess_parallel.cpp).
// Internal to image_preprocess.cpp.
#pragma once

#include <cstdint>

namespace vlm {

constexpr int kResizeTileRows = 16;

// rows: [nr] input rows (in_w RGB pixels each), 1 <= nr <= kResizeTileRows; out_rows: [nr]
// output rows (out_w RGB pixels each). Output sample xx reads input pixels
// [first[xx], first[xx] + count[xx]) with weights w[xx * ksize + j]. tile: scratch of
// (in_w + out_w) * kResizeTileRows * 3 bytes, zero-initialised once by the caller (lanes of rows
// past nr are computed from it and dropped).
void resize_hpass_tile_avx2(const uint8_t* const* rows, int nr, int in_w, int out_w, const int32_t* first,
                            const int32_t* count, const int32_t* w, int ksize, uint8_t* const* out_rows,
                            uint8_t* tile);

}  // namespace vlm
