#include "model/vision/cuda/cuda_onevision_vision_runner.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/vision/cuda/cuda_llava_vision_runner.h"

namespace vlm {

CudaOnevisionVisionRunner::CudaOnevisionVisionRunner(const OnevisionSpec& spec, const WeightSource& tower,
                                                     const WeightSource& projector, const WeightSource& newline_source,
                                                     const WeightRef& newline, DType dt)
    : spec_(spec), dt_(dt), layers_(dt), lanes_(dt, 1) {
  vision_ = std::make_unique<LlavaVision>(spec_.llava, layers_, tower, projector);
  wiring_ = std::make_unique<OnevisionWiring>(*vision_, layers_, newline_source, newline);
  weight_bytes_ = layers_.weight_bytes();
}

CudaOnevisionVisionRunner::~CudaOnevisionVisionRunner() {
  teardown_on_device();  // the streams, events and buffers below go on the tower's device
  meta_done_.synchronize_quietly();  // the pinned ints outlive the last call's copies
}

int64_t CudaOnevisionVisionRunner::cost(const MediaPixels& item) const {
  return static_cast<int64_t>(item.data.size()) / tile_floats();
}

int64_t CudaOnevisionVisionRunner::out_rows(const MediaPixels& item) const {
  if (item.modality == Modality::Video) return cost(item) * pooled_frame_tokens(static_cast<int>(spec_.grid())) + 1;
  return spec_.layout({item.height, item.width}).num_tokens();
}

// The index arrays of a call over `tiles` tiles in all (items one after the other, at most one
// item a tile). An item of N tiles: the tower's kept rows [N * Ti] and segment bounds [N + 1];
// an image's base-tile rows [g^2], map rows, copy sources and destinations and newline rows with
// their table indices (each at most (N - 1) g^2); a video's pooled rows [N * ceil(g/2)^2] and its
// newline (2). So at most N (Ti + 1 + 5 g^2) + 3 <= N (Ti + 4 + 5 g^2).
int64_t CudaOnevisionVisionRunner::ints_for(int64_t tiles) const {
  const int64_t g = spec_.grid();
  return tiles * (spec_.llava.tokens_per_image() + 4 + 5 * g * g);
}

int64_t CudaOnevisionVisionRunner::workspace_bytes(int64_t tiles) const {
  const auto scratch = CudaLlavaVisionRunner::scratch_per_image(spec_.llava.vision, dt_);  // per tile
  return CudaVisionLanes::bytes(wiring_->largest_plan(tiles), tiles, scratch, ints_for(tiles), dt_) +
         tiles * tile_floats() * 4;
}

void CudaOnevisionVisionRunner::reserve(int64_t tiles) {
  const cuda::CudaDeviceGuard on(device_);
  lanes_.reserve(wiring_->largest_plan(tiles), tiles, CudaLlavaVisionRunner::scratch_per_image(spec_.llava.vision, dt_),
                 ints_for(tiles));
  pixels_.resize(static_cast<size_t>(tiles * tile_floats()) * 4);
  reserved_ = tiles;
}

void CudaOnevisionVisionRunner::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  int64_t tile0 = 0;
  for (const MediaPixels* it : items) {
    const int64_t n = cost(*it);
    VLM_CHECK(n > 0 && static_cast<int64_t>(it->data.size()) == n * tile_floats(),
              "OneVision item of {} values, the tower takes whole 3x{}x{} tiles", it->data.size(), spec_.tile_size(),
              spec_.tile_size());
    VLM_CHECK(tile0 + n <= reserved_, "vision call of more than {} tiles, {} reserved", tile0 + n, reserved_);
    VLM_CUDA_CHECK(cudaMemcpyAsync(pixels_.as<float>() + tile0 * tile_floats(), it->data.data(), it->data.size() * 4,
                                   cudaMemcpyHostToDevice, s));
    tile0 += n;
  }
}

void CudaOnevisionVisionRunner::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  const int64_t C = out_features();
  int64_t tiles = 0;
  for (const MediaPixels* it : items) tiles += cost(*it);
  VLM_CHECK(!items.empty() && tiles <= reserved_, "vision call of {} tiles, {} reserved", tiles, reserved_);
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // the pinned ints have left for the previous call
  lanes_.ints().reset();
  int64_t tile0 = 0, row = 0;
  for (const MediaPixels* it : items) {
    const int64_t N = cost(*it), rows = out_rows(*it);
    lanes_.ints().new_step();  // this item's arrays (an earlier item's may have had their addresses)
    const Act px{pixels_.as<float>() + tile0 * tile_floats(), N, tile_floats(), DType::F32};
    const Act dst{out + row * C, rows, C, DType::F32};
    if (it->modality == Modality::Video) {
      CudaStep& st = lanes_.step(0, wiring_->plan(N, nullptr), 0, N, s);
      wiring_->video(st, px, dst);
    } else {
      const AnyresLayout a = spec_.layout({it->height, it->width});
      CudaStep& st = lanes_.step(0, wiring_->plan(N, &a), 0, N, s);
      wiring_->image(st, px, a, dst);
    }
    tile0 += N;
    row += rows;
  }
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

}  // namespace vlm
