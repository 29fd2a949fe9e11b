#include "model/vision/cuda/cuda_llava_vision_runner.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm {

CudaLlavaVisionRunner::CudaLlavaVisionRunner(const LlavaVisionSpec& spec, const WeightSource& tower,
                                             const WeightSource& projector, DType dt)
    : dt_(dt), layers_(dt), lanes_(dt, 1) {
  wiring_ = std::make_unique<LlavaVision>(spec, layers_, tower, projector);
  weight_bytes_ = layers_.weight_bytes();
}

CudaLlavaVisionRunner::~CudaLlavaVisionRunner() {
  teardown_on_device();  // the streams, events and buffers below go on the tower's device
  meta_done_.synchronize_quietly();  // the pinned ints outlive the last call's copies
}

// Per image: the norm before a linear layer or an MLP [L, C] dt, the unfolded patches [P, K] dt
// and the conv's output [P, C] f32.
CudaVisionLanes::ScratchPerRow CudaLlavaVisionRunner::scratch_per_image(const ClipVisionConfig& c, DType dt) {
  const auto e = static_cast<int64_t>(dtype_size(dt));
  const int64_t P = c.num_patches(), K = 3 * c.patch_size * c.patch_size;
  CudaVisionLanes::ScratchPerRow s{};
  s[CudaScratch::kNormOut] = c.num_positions() * c.hidden_size * e;
  s[CudaScratch::kPatches] = P * K * e;
  s[CudaScratch::kPatchOut] = P * c.hidden_size * 4;
  return s;
}

// The rows the output keeps [N * Ti] and the images' segment bounds [N + 1].
int64_t CudaLlavaVisionRunner::ints_for(int64_t N) const { return N * wiring_->spec().tokens_per_image() + N + 1; }

int64_t CudaLlavaVisionRunner::workspace_bytes(int64_t N) const {
  const int64_t S = wiring_->spec().vision.image_size;
  return CudaVisionLanes::bytes(wiring_->plan(N), N, scratch_per_image(wiring_->spec().vision, dt_), ints_for(N), dt_) +
         N * 3 * S * S * 4;
}

void CudaLlavaVisionRunner::reserve(int64_t N) {
  const cuda::CudaDeviceGuard on(device_);
  const int64_t S = wiring_->spec().vision.image_size;
  lanes_.reserve(wiring_->plan(N), N, scratch_per_image(wiring_->spec().vision, dt_), ints_for(N));
  pixels_.resize(static_cast<size_t>(N * 3 * S * S) * 4);
  reserved_ = N;
}

void CudaLlavaVisionRunner::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  const int64_t S = wiring_->spec().vision.image_size;
  VLM_CHECK(static_cast<int64_t>(items.size()) <= reserved_, "vision call of {} images, {} reserved", items.size(),
            reserved_);
  for (size_t n = 0; n < items.size(); ++n) {
    const MediaPixels& it = *items[n];
    VLM_CHECK(static_cast<int64_t>(it.data.size()) == 3 * S * S, "image of {} values, the tower takes 3x{}x{}",
              it.data.size(), S, S);
    VLM_CUDA_CHECK(cudaMemcpyAsync(pixels_.as<float>() + static_cast<int64_t>(n) * 3 * S * S, it.data.data(),
                                   it.data.size() * 4, cudaMemcpyHostToDevice, s));
  }
}

void CudaLlavaVisionRunner::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  const LlavaVisionSpec& spec = wiring_->spec();
  const auto N = static_cast<int64_t>(items.size());
  VLM_CHECK(N > 0 && N <= reserved_, "vision call of {} images, {} reserved", N, reserved_);
  const int64_t S = spec.vision.image_size;
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // the pinned ints have left for the previous call
  lanes_.ints().reset();
  CudaStep& st = lanes_.step(0, wiring_->plan(N), 0, N, s);
  wiring_->forward(st, Act{pixels_.get(), N, 3 * S * S, DType::F32},
                   Act{out, N * spec.tokens_per_image(), spec.out_features, DType::F32});
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

}  // namespace vlm
