// Qwen2-VL frame preprocessing on the GPU, from 8-bit RGB frames to the vision tower's patch
// rows: PIL's bicubic resize in two separable passes on the fixed-point taps the CPU uses
// (model/media/image_preprocess.h: resize_axis_taps), then rescale + normalize through the
// per-channel table of the 256 levels (qwen2vl_normalize_table) and the patchify into rows.
// Integer sums, 8-bit rounding between and after the passes and the same table make the output
// bit-identical to the CPU path (model/media/qwen2vl_preprocess.h); rows in bf16/f16 are the f32
// values rounded to nearest even once, as the CPU path's convert_from_f32.
// These are the plain forms (one output value per thread, no tiling); their references are the
// CPU functions above, compared in tests/kernels/cuda/test_cuda_frame_preprocess.cpp.
// Contract as ops_cuda.h: device pointers, work enqueued on `s` (no host sync), launch checked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

// Fixed-point taps of one axis on the device (resize_axis_taps' arrays): output sample i reads
// input [first[i], first[i] + count[i]) with weights w[i * ksize ...] (22 fractional bits).
struct ResizeTapsDev {
  const int32_t* first;  // [out]
  const int32_t* count;  // [out]
  const int32_t* w;      // [out, ksize]
  int ksize;
  int out;
};

// Horizontal pass: in [rows, in_w, 3] -> out [rows, taps.out, 3], u8.
void resize_rows_u8(const uint8_t* in, int64_t rows, int in_w, const ResizeTapsDev& taps, uint8_t* out,
                    cudaStream_t s);
// Vertical pass: in [*, width, 3] whose row 0 is input row `shift` -> out [taps.out, width, 3]:
// output row yy reads rows first[yy] - shift ... of in.
void resize_cols_u8(const uint8_t* in, int shift, int width, const ResizeTapsDev& taps, uint8_t* out,
                    cudaStream_t s);

// frames [G * tp, h, w, 3] u8 (G temporal groups of tp frames each, already at the target size)
// -> rows [G * (h / ps) * (w / ps), 3 * tp * ps * ps] of dt (F32, BF16 or F16): row order
// (g, h / (ps * ms), w / (ps * ms), ms, ms), columns (channel, frame, ky, kx), each value
// table[channel * 256 + level] (table [3, 256] f32).
void patchify_frames_u8(const uint8_t* frames, int64_t G, int tp, int h, int w, int ps, int ms, const float* table,
                        void* rows, DType dt, cudaStream_t s);

}  // namespace vlm::cuda
