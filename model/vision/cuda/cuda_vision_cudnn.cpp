// The vision towers' equal-segment attention through cuDNN (contract in cuda_vision_cudnn.h).
#include "model/vision/cuda/cuda_vision_cudnn.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "kernels/core/env_switch.h"
#include "kernels/core/log.h"

namespace vlm {
namespace {

bool env_enabled() { return env_switch("VLM_CUDA_VISION_CUDNN", true); }

}  // namespace

CudaVisionCudnn::CudaVisionCudnn(int mode) : enabled_(mode < 0 ? env_enabled() : mode != 0) {}

CudaVisionCudnn::~CudaVisionCudnn() = default;

bool CudaVisionCudnn::attention(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int H,
                                int D, int segments, int seg_len, float scale, void* out, cudaStream_t stream) {
  if (!enabled_ || (dt != DType::BF16 && dt != DType::F16) || D % 8 != 0 || D > 128 || segments <= 0 || seg_len <= 0)
    return false;
  cuda::CudnnAttentionShape shape;
  shape.batch = segments;
  shape.seq_q = shape.seq_kv = seg_len;
  shape.heads = shape.kv_heads = H;
  shape.head_dim = D;
  shape.causal = false;
  shape.dtype = dt;
  shape.row_stride = row_stride;
  if (failed_.count(shape)) return false;  // warned when it failed
  if (att_ == nullptr) {
    att_ = std::make_unique<cuda::CudnnAttention>();
    std::string why;
    if (!att_->available(&why)) {
      VLM_LOG_WARN("cuDNN vision attention unavailable ({}); the vision towers use the built-in kernel", why);
      enabled_ = false;
      return false;
    }
    VLM_LOG_INFO("vision attention of equal segments through cuDNN {} ({})", att_->version(), att_->library_path());
  }
  std::string why;
  if (att_->num_candidates(shape) == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!att_->prepare(shape, &why)) {
      VLM_LOG_WARN("cuDNN vision plan for {} segments of {} (H {}, D {}) did not build; the built-in kernel runs them: {}",
                   segments, seg_len, H, D, why);
      failed_.insert(shape);
      return false;
    }
    VLM_LOG_INFO("cuDNN vision plan for {} segments of {} built in {:.0f} ms", segments, seg_len,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!att_->run(shape, q, k, v, out, scale, stream, &why)) {
    VLM_LOG_WARN("cuDNN vision attention failed ({} segments of {}); the built-in kernel runs them: {}", segments,
                 seg_len, why);
    failed_.insert(shape);
    return false;
  }
  ++calls_;
  return true;
}

}  // namespace vlm
