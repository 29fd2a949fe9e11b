#include "kernels/cuda/media/frame_preprocess_cuda.h"

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {

namespace {

constexpr int kPrecisionBits = 22;  // model/media/image_preprocess.h kResizePrecisionBits

__device__ __forceinline__ uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One thread per output value (row, x, channel).
__global__ void resize_rows_kernel(const uint8_t* in, int64_t rows, int in_w, ResizeTapsDev t, uint8_t* out) {
  const int64_t n = rows * t.out * 3;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % 3);
    const int xx = static_cast<int>((i / 3) % t.out);
    const int64_t r = i / (3 * static_cast<int64_t>(t.out));
    const uint8_t* src = in + (r * in_w + t.first[xx]) * 3 + c;
    const int32_t* w = t.w + static_cast<int64_t>(xx) * t.ksize;
    int32_t acc = 1 << (kPrecisionBits - 1);
    for (int k = 0; k < t.count[xx]; ++k) acc += static_cast<int32_t>(src[k * 3]) * w[k];
    out[i] = clip8(acc);
  }
}

__global__ void resize_cols_kernel(const uint8_t* in, int shift, int width, ResizeTapsDev t, uint8_t* out) {
  const int64_t row = static_cast<int64_t>(width) * 3, n = t.out * row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int yy = static_cast<int>(i / row);
    const int64_t col = i % row;
    const uint8_t* src = in + static_cast<int64_t>(t.first[yy] - shift) * row + col;
    const int32_t* w = t.w + static_cast<int64_t>(yy) * t.ksize;
    int32_t acc = 1 << (kPrecisionBits - 1);
    for (int k = 0; k < t.count[yy]; ++k) acc += static_cast<int32_t>(src[k * row]) * w[k];
    out[i] = clip8(acc);
  }
}

template <typename T>
__global__ void patchify_kernel(const uint8_t* frames, int64_t G, int tp, int h, int w, int ps, int ms,
                                const float* table, T* rows) {
  const int gh = h / ps, gw = w / ps;
  const int64_t K = 3LL * tp * ps * ps, per_group = static_cast<int64_t>(gh) * gw, n = G * per_group * K;
  const int64_t frame_bytes = static_cast<int64_t>(h) * w * 3;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    const int64_t g = r / per_group, rr = r % per_group;
    const int unit = ms * ms, bw = gw / ms;
    const int64_t blk = rr / unit;
    const int m = static_cast<int>(rr % unit);
    const int by = static_cast<int>(blk / bw), bx = static_cast<int>(blk % bw);
    const int y0 = (by * ms + m / ms) * ps, x0 = (bx * ms + m % ms) * ps;
    const int c = static_cast<int>(k / (static_cast<int64_t>(tp) * ps * ps));
    const int ft = static_cast<int>((k / (ps * ps)) % tp);
    const int ky = static_cast<int>((k / ps) % ps), kx = static_cast<int>(k % ps);
    const uint8_t v = frames[(g * tp + ft) * frame_bytes + (static_cast<int64_t>(y0 + ky) * w + x0 + kx) * 3 + c];
    rows[i] = from_f32<T>(table[c * 256 + v]);
  }
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace

void resize_rows_u8(const uint8_t* in, int64_t rows, int in_w, const ResizeTapsDev& taps, uint8_t* out,
                    cudaStream_t s) {
  const int64_t n = rows * taps.out * 3;
  if (n == 0) return;
  resize_rows_kernel<<<blocks_for(n, 256), 256, 0, s>>>(in, rows, in_w, taps, out);
  VLM_CUDA_CHECK_LAUNCH();
}

void resize_cols_u8(const uint8_t* in, int shift, int width, const ResizeTapsDev& taps, uint8_t* out,
                    cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(taps.out) * width * 3;
  if (n == 0) return;
  resize_cols_kernel<<<blocks_for(n, 256), 256, 0, s>>>(in, shift, width, taps, out);
  VLM_CUDA_CHECK_LAUNCH();
}

void patchify_frames_u8(const uint8_t* frames, int64_t G, int tp, int h, int w, int ps, int ms, const float* table,
                        void* rows, DType dt, cudaStream_t s) {
  const int64_t n = G * (h / ps) * (w / ps) * 3LL * tp * ps * ps;
  if (n == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    patchify_kernel<E><<<blocks_for(n, 256), 256, 0, s>>>(frames, G, tp, h, w, ps, ms, table, static_cast<E*>(rows));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
