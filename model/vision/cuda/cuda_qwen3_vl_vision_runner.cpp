#include "model/vision/cuda/cuda_qwen3_vl_vision_runner.h"

#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm {

CudaQwen3VLVisionRunner::CudaQwen3VLVisionRunner(const Qwen3VLVisionConfig& config, const WeightSource& weights,
                                                 DType dt)
    : config_(config), dt_(dt), layers_(dt), lanes_(dt, 1) {
  tower_ = std::make_unique<Qwen3VLVisionTower>(config_, layers_, weights);
  weight_bytes_ = layers_.weight_bytes();
}

CudaQwen3VLVisionRunner::~CudaQwen3VLVisionRunner() {
  teardown_on_device();  // the streams, events and buffers below go on the tower's device
  meta_done_.synchronize_quietly();  // the pinned ints outlive the last call's copies
}

int64_t CudaQwen3VLVisionRunner::cost(const MediaPixels& item) const {
  return static_cast<int64_t>(item.grid_thw[0]) * item.grid_thw[1] * item.grid_thw[2];
}

int64_t CudaQwen3VLVisionRunner::out_rows(const MediaPixels& item) const {
  const int64_t ms = config_.spatial_merge_size;
  return cost(item) / (ms * ms);
}

// Per patch: the norm before a linear layer or an MLP [Cv] dt (the DeepStack mergers' norm over
// merge^2 Cv per unit is the same bytes), the rotary table [D] f32; the MLPs are not gated.
CudaVisionLanes::ScratchPerRow CudaQwen3VLVisionRunner::scratch_per_row() const {
  CudaVisionLanes::ScratchPerRow s{};
  s[CudaScratch::kNormOut] = config_.hidden_size * static_cast<int64_t>(dtype_size(dt_));
  s[CudaScratch::kRopeTable] = config_.head_dim() * 4;
  return s;
}

// Metadata of a call over P patches: the 2-D positions [2P], the frame bounds (at most P + 1),
// the position table's blends (11 ints per patch of a frame, at most 11P), and room to spare.
int64_t CudaQwen3VLVisionRunner::ints_for(int64_t P) const { return 16 * P + 64; }

int64_t CudaQwen3VLVisionRunner::workspace_bytes(int64_t P) const {
  Qwen3VLVisionLayout lay;
  lay.num_patches = P;
  const int64_t unit = static_cast<int64_t>(config_.spatial_merge_size) * config_.spatial_merge_size;
  return CudaVisionLanes::bytes(tower_->plan(lay), P, scratch_per_row(), ints_for(P), dt_) +
         P * config_.patch_dim() * static_cast<int64_t>(dtype_size(dt_)) +  // pixels (dt)
         planes() * (P / unit) * config_.out_hidden_size * 4 +  // the stacked planes (f32)
         CudaFramePreprocessor::workspace_bytes(config_.temporal_patch_size);  // Frames8 items' scratch
}

void CudaQwen3VLVisionRunner::reserve(int64_t P) {
  const cuda::CudaDeviceGuard on(device_);
  VLM_CHECK(P > 0, "a Qwen3-VL vision reservation of {} patches", P);
  Qwen3VLVisionLayout lay;
  lay.num_patches = P;
  const int64_t unit = static_cast<int64_t>(config_.spatial_merge_size) * config_.spatial_merge_size;
  lanes_.reserve(tower_->plan(lay), P, scratch_per_row(), ints_for(P));
  pixels_.resize(static_cast<size_t>(P * config_.patch_dim()) * dtype_size(dt_));
  stacked_.resize(static_cast<size_t>(planes() * (P / unit) * config_.out_hidden_size) * 4);
  frames_.reserve(config_.temporal_patch_size);
  reserved_ = P;
}

void CudaQwen3VLVisionRunner::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  const int64_t K = config_.patch_dim();
  const size_t e = dtype_size(dt_);
  int64_t row = 0;
  for (const MediaPixels* it : items) {
    VLM_CHECK(it->is_frames8() || static_cast<int64_t>(it->data.size()) == cost(*it) * K,
              "Qwen3-VL item of {} values for grid {}x{}x{} (patch rows of {})", it->data.size(), it->grid_thw[0],
              it->grid_thw[1], it->grid_thw[2], K);
    VLM_CHECK(!it->is_frames8() || it->preprocess.patch_dim() == K, "Qwen3-VL Frames8 item of patch rows of {}, not {}",
              it->preprocess.patch_dim(), K);
    VLM_CHECK(row + cost(*it) <= reserved_, "vision call beyond the {} patches reserved", reserved_);
    char* dst = pixels_.as<char>() + static_cast<size_t>(row * K) * e;
    if (it->is_frames8()) {  // 8-bit frames: the rows made on the GPU in dt, in s's order (the host frames read now)
      frames_.rows(*it, 0, it->grid_thw[0], dst, dt_, s);
    } else if (dt_ == DType::F32) {
      VLM_CUDA_CHECK(cudaMemcpyAsync(dst, it->data.data(), it->data.size() * 4, cudaMemcpyHostToDevice, s));
    } else {  // the patch linear reads its input in the tower's dtype
      staging_.resize(it->data.size() * e);
      convert_from_f32(it->data.data(), dt_, staging_.data(), static_cast<int64_t>(it->data.size()));
      // Pageable memory: the copy has taken the bytes when it returns (staging_ is free again).
      VLM_CUDA_CHECK(cudaMemcpyAsync(dst, staging_.data(), staging_.size(), cudaMemcpyHostToDevice, s));
    }
    row += cost(*it);
  }
}

void CudaQwen3VLVisionRunner::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  std::vector<std::array<int32_t, 3>> grids;
  for (const MediaPixels* it : items) grids.push_back(it->grid_thw);
  const Qwen3VLVisionLayout lay = qwen3_vl_vision_layout(config_, grids);
  const int64_t P = lay.num_patches, unit = static_cast<int64_t>(config_.spatial_merge_size) * config_.spatial_merge_size;
  const int64_t U = P / unit, C = config_.out_hidden_size, n = planes();
  VLM_CHECK(P <= reserved_, "vision call of {} patches > the {} reserved", P, reserved_);
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // the pinned ints have left for the previous call
  lanes_.ints().reset();
  CudaStep& st = lanes_.step(0, tower_->plan(lay), 0, P, s);
  tower_->forward(st, Act{pixels_.get(), P, config_.patch_dim(), dt_}, lay,
                  Act{stacked_.get(), n * U, C, DType::F32});
  // [(1 + K) U, C] -> out [U, (1 + K) C]: plane p into columns [p C, (p + 1) C) of every row.
  for (int64_t p = 0; p < n; ++p)
    VLM_CUDA_CHECK(cudaMemcpy2DAsync(out + p * C, static_cast<size_t>(n * C) * 4, stacked_.as<float>() + p * U * C,
                                     static_cast<size_t>(C) * 4, static_cast<size_t>(C) * 4, static_cast<size_t>(U),
                                     cudaMemcpyDeviceToDevice, s));
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

}  // namespace vlm
