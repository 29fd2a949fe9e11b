// CudaFramePreprocessor: the patch rows of a Frames8 media item (model/media/media_pixels.h) made
// on the GPU, a temporal group at a time: its tp frames uploaded as 8-bit RGB (pageable copies,
// stream-ordered), resized when the target differs (kernels/cuda/media/frame_preprocess_cuda.h:
// PIL's bicubic on the CPU's fixed-point taps), then normalized and patchified straight into the
// tower's input rows in its dtype. Bit-identical to qwen2vl_preprocess / qwen2vl_frames_rows on
// the CPU (tests/model/vision/cuda/test_cuda_frame_preprocessor.cpp).
//
// Memory (reserve(tp), all at once, inside the vision tower's reservation): for frames within
// frames8_fit() (model/media/qwen2vl_frames.h: at most kFrames8MaxPixels = 4 Mi pixels a frame,
// target and intermediate alike), one source frame, one horizontally resized frame and tp
// resized frames, 3 bytes a pixel: (2 + tp) * 12 MiB (48 MiB for Qwen2-VL's tp = 2), plus the
// taps (0.6 MiB) and the normalize table (3 KiB). workspace_bytes(tp) says it without a GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/device_buffer.h"
#include "model/media/media_pixels.h"

namespace vlm {

class CudaFramePreprocessor {
 public:
  static int64_t workspace_bytes(int temporal_patch_size);
  void reserve(int temporal_patch_size);
  int64_t reserved_bytes() const;

  // Rows of temporal groups [t0, t1) of a Frames8 item -> out [(t1 - t0) * h * w, K] of dt
  // (device; h, w = grid_thw[1], grid_thw[2]), enqueued on s; the host frames are read before it
  // returns. The item must be Frames8, fit frames8_fit() and have the reserved temporal patch
  // size (InternalError otherwise: the loader only makes such items).
  void rows(const MediaPixels& item, int32_t t0, int32_t t1, void* out, DType dt, cudaStream_t s);

 private:
  int tp_ = 0;
  cuda::DeviceBuffer raw_, mid_, resized_, taps_, table_;
};

}  // namespace vlm
