#include "model/vision/cuda/cuda_frame_preprocessor.h"

#include <algorithm>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/cuda/media/frame_preprocess_cuda.h"
#include "model/media/image_preprocess.h"
#include "model/media/qwen2vl_frames.h"

namespace vlm {

namespace {

// Ints of one axis's taps at most: first + count [out] and weights [out, ksize] with
// ksize <= 4 in / out + 3 (image_preprocess.cpp's kernel_size), sides <= kFrames8MaxSide.
constexpr int64_t kAxisTapInts = 2LL * kFrames8MaxSide + 7LL * kFrames8MaxSide;
constexpr int64_t kFrameBytes = kFrames8MaxPixels * 3;

}  // namespace

int64_t CudaFramePreprocessor::workspace_bytes(int tp) {
  return (2 + static_cast<int64_t>(tp)) * kFrameBytes + 2 * kAxisTapInts * 4 + 3 * 256 * 4;
}

void CudaFramePreprocessor::reserve(int tp) {
  VLM_CHECK(tp >= 1, "temporal patch size {}", tp);
  tp_ = tp;
  raw_.resize(static_cast<size_t>(kFrameBytes));
  mid_.resize(static_cast<size_t>(kFrameBytes));
  resized_.resize(static_cast<size_t>(tp * kFrameBytes));
  taps_.resize(static_cast<size_t>(2 * kAxisTapInts * 4));
  table_.resize(3 * 256 * 4);
}

int64_t CudaFramePreprocessor::reserved_bytes() const {
  return static_cast<int64_t>(raw_.bytes() + mid_.bytes() + resized_.bytes() + taps_.bytes() + table_.bytes());
}

void CudaFramePreprocessor::rows(const MediaPixels& item, int32_t t0, int32_t t1, void* out, DType dt,
                                 cudaStream_t s) {
  const Qwen2VLPreprocessConfig& cfg = item.preprocess;
  const int tp = cfg.temporal_patch_size, ps = cfg.patch_size, ms = cfg.merge_size;
  const int64_t n = static_cast<int64_t>(item.frames.size());
  VLM_CHECK(item.is_frames8() && n > 0, "GPU preprocessing of an item that is not 8-bit frames");
  VLM_CHECK(tp == tp_, "item of temporal patch size {}, {} reserved", tp, tp_);
  VLM_CHECK(0 <= t0 && t0 < t1 && t1 <= item.grid_thw[0] && (n + tp - 1) / tp == item.grid_thw[0],
            "temporal groups {}..{} of {} ({} frames)", t0, t1, item.grid_thw[0], n);
  const int in_w = item.frames[0].width, in_h = item.frames[0].height, out_w = item.width, out_h = item.height;
  VLM_CHECK(frames8_fit(in_w, in_h, out_w, out_h), "frames {}x{} -> {}x{} beyond the GPU preprocessing's reservation",
            in_w, in_h, out_w, out_h);
  VLM_CHECK(out_h == item.grid_thw[1] * ps && out_w == item.grid_thw[2] * ps, "target {}x{} for grid {}x{}", out_w,
            out_h, item.grid_thw[1], item.grid_thw[2]);
  // The normalize table and the taps: one pageable upload each (staged before the call returns).
  const std::array<std::array<float, 256>, 3> lut = qwen2vl_normalize_table(cfg);
  VLM_CUDA_CHECK(cudaMemcpyAsync(table_.get(), lut.data(), sizeof lut, cudaMemcpyHostToDevice, s));
  const bool rw = out_w != in_w, rh = out_h != in_h;
  std::vector<int32_t> host;  // [h taps | v taps]
  auto add_axis = [&](int in_size, int out_size, size_t* at) -> int {
    const ResizeAxisTaps t = resize_axis_taps(in_size, out_size);
    *at = host.size();
    host.insert(host.end(), t.first.begin(), t.first.end());
    host.insert(host.end(), t.count.begin(), t.count.end());
    host.insert(host.end(), t.w.begin(), t.w.end());
    return t.ksize;
  };
  size_t h_at = 0, v_at = 0;
  int h_k = 0, v_k = 0, y_first = 0, y_last = in_h;
  if (rw) h_k = add_axis(in_w, out_w, &h_at);
  if (rh) {
    v_k = add_axis(in_h, out_h, &v_at);
    y_first = host[v_at];                                                 // first[0]
    y_last = host[v_at + out_h - 1] + host[v_at + 2 * out_h - 1];         // first[last] + count[last]
  }
  VLM_CHECK(static_cast<int64_t>(host.size()) <= 2 * kAxisTapInts, "{} tap ints > the {} reserved", host.size(),
            2 * kAxisTapInts);
  if (!host.empty())
    VLM_CUDA_CHECK(cudaMemcpyAsync(taps_.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, s));
  const auto* d = taps_.as<int32_t>();
  const cuda::ResizeTapsDev th{d + h_at, d + h_at + out_w, d + h_at + 2 * out_w, h_k, out_w};
  const cuda::ResizeTapsDev tv{d + v_at, d + v_at + out_h, d + v_at + 2 * out_h, v_k, out_h};

  const size_t src_bytes = static_cast<size_t>(in_w) * in_h * 3, dst_bytes = static_cast<size_t>(out_w) * out_h * 3;
  const int64_t hw = static_cast<int64_t>(item.grid_thw[1]) * item.grid_thw[2], K = cfg.patch_dim();
  auto* resized = resized_.as<uint8_t>();
  for (int32_t t = t0; t < t1; ++t) {
    for (int ft = 0; ft < tp; ++ft) {
      const RgbImage& f = item.frames[static_cast<size_t>(std::min<int64_t>(int64_t{t} * tp + ft, n - 1))];  // pad: the last
      uint8_t* slot = resized + static_cast<size_t>(ft) * dst_bytes;
      if (!rw && !rh) {  // already the target: straight into the group's slot
        VLM_CUDA_CHECK(cudaMemcpyAsync(slot, f.pixels.data(), src_bytes, cudaMemcpyHostToDevice, s));
        continue;
      }
      VLM_CUDA_CHECK(cudaMemcpyAsync(raw_.get(), f.pixels.data(), src_bytes, cudaMemcpyHostToDevice, s));
      const auto* raw = raw_.as<uint8_t>();
      if (rw && rh) {
        cuda::resize_rows_u8(raw + static_cast<size_t>(y_first) * in_w * 3, y_last - y_first, in_w, th,
                             mid_.as<uint8_t>(), s);
        cuda::resize_cols_u8(mid_.as<uint8_t>(), y_first, out_w, tv, slot, s);
      } else if (rw) {
        cuda::resize_rows_u8(raw, in_h, in_w, th, slot, s);
      } else {
        cuda::resize_cols_u8(raw, 0, in_w, tv, slot, s);
      }
    }
    cuda::patchify_frames_u8(resized, 1, tp, out_h, out_w, ps, ms, table_.as<float>(),
                             static_cast<char*>(out) + static_cast<size_t>((t - t0) * hw * K) * dtype_size(dt), dt, s);
  }
}

}  // namespace vlm
