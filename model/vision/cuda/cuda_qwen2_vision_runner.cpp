#include "model/vision/cuda/cuda_qwen2_vision_runner.h"

#include <algorithm>
#include <cstdint>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm {

CudaQwen2VisionRunner::CudaQwen2VisionRunner(const Qwen2VisionEncoder& host, DType dt)
    : host_(host), dt_(dt), layers_(dt), lanes_(dt) {
  tower_ = std::make_unique<Qwen2VisionTower>(host.config(), layers_, host.weights());
  weight_bytes_ = layers_.weight_bytes();
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
}

CudaQwen2VisionRunner::~CudaQwen2VisionRunner() {
  teardown_on_device();  // the streams, events and buffers below go on the tower's device
  meta_done_.synchronize_quietly();  // the pinned ints outlive the last call's copies
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  if (side_) {
    cudaStreamSynchronize(side_);
    cudaStreamDestroy(side_);
  }
}

int64_t CudaQwen2VisionRunner::cost(const MediaPixels& item) const {
  return static_cast<int64_t>(item.grid_thw[0]) * item.grid_thw[1] * item.grid_thw[2];
}

int64_t CudaQwen2VisionRunner::out_rows(const MediaPixels& item) const {
  const int64_t ms = host_.config().spatial_merge_size;
  return cost(item) / (ms * ms);
}

// Per patch: the norm before a linear layer or an MLP [C] dt, the gated MLP's SiLU·mul [I] dt,
// the rotary table [D] f32.
CudaVisionLanes::ScratchPerRow CudaQwen2VisionRunner::scratch_per_row() const {
  const Qwen2VisionConfig& c = host_.config();
  const auto e = static_cast<int64_t>(dtype_size(dt_));
  CudaVisionLanes::ScratchPerRow s{};
  s[CudaScratch::kNormOut] = c.hidden_size * e;
  s[CudaScratch::kAct] = c.qwen25 ? c.intermediate_size * e : 0;
  s[CudaScratch::kRopeTable] = c.head_dim() * 4;
  return s;
}

// Metadata of calls over `patches` patches: the gather of units [P], positions [2P], frame and
// window bounds (at most P + 1 each, plus one per group), the scatter [U].
int64_t CudaQwen2VisionRunner::ints_for(int64_t P) const {
  const int64_t unit = static_cast<int64_t>(host_.config().spatial_merge_size) * host_.config().spatial_merge_size;
  return 5 * P + 2 * (P / unit + 1) + P / unit;
}

int64_t CudaQwen2VisionRunner::workspace_bytes(int64_t P) const {
  Qwen2VisionLayout lay;
  lay.num_patches = P;
  const Qwen2VisionConfig& c = host_.config();
  return CudaVisionLanes::bytes(tower_->plan(lay), P, scratch_per_row(), ints_for(P), dt_) +
         P * c.patch_dim() * 4 +                                     // pixels (f32 upload)
         CudaFramePreprocessor::workspace_bytes(c.temporal_patch_size);  // Frames8 items' scratch
}

void CudaQwen2VisionRunner::reserve(int64_t P) {
  const cuda::CudaDeviceGuard on(device_);
  const Qwen2VisionConfig& c = host_.config();
  Qwen2VisionLayout lay;
  lay.num_patches = P;
  lanes_.reserve(tower_->plan(lay), P, scratch_per_row(), ints_for(P));
  const auto n = static_cast<size_t>(P * c.patch_dim());
  pixels_.resize(n * 4);
  staging_.resize(n * dtype_size(dt_));
  frames_.reserve(c.temporal_patch_size);
  reserved_ = P;
}

void CudaQwen2VisionRunner::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  const int64_t K = host_.config().patch_dim();
  int64_t row = 0;
  for (const MediaPixels* it : items) {
    VLM_CHECK(it->is_frames8() || static_cast<int64_t>(it->data.size()) == cost(*it) * K,
              "item of {} values for grid {}x{}x{}", it->data.size(), it->grid_thw[0], it->grid_thw[1], it->grid_thw[2]);
    VLM_CHECK(row + cost(*it) <= reserved_, "vision call beyond the {} patches reserved", reserved_);
    if (it->is_frames8()) {  // rows made on the GPU, on copy_ (which owns the scratch), as f32
      VLM_CUDA_CHECK(cudaEventRecord(tower_free_, s));
      VLM_CUDA_CHECK(cudaStreamWaitEvent(copy_, tower_free_));
      frames_.rows(*it, 0, it->grid_thw[0], pixels_.as<float>() + row * K, DType::F32, copy_);
      VLM_CUDA_CHECK(cudaEventRecord(uploaded_, copy_));
      VLM_CUDA_CHECK(cudaStreamWaitEvent(s, uploaded_));
    } else {
      VLM_CUDA_CHECK(cudaMemcpyAsync(pixels_.as<float>() + row * K, it->data.data(), it->data.size() * 4,
                                     cudaMemcpyHostToDevice, s));
    }
    row += cost(*it);
  }
}

void CudaQwen2VisionRunner::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  std::vector<std::array<int32_t, 3>> grids;
  for (const MediaPixels* it : items) grids.push_back(it->grid_thw);
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // the pinned ints have left for the previous call
  lanes_.ints().reset();
  run_grids(grids, pixels_.get(), DType::F32, out, s, 0, 0);
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

void CudaQwen2VisionRunner::encode(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  std::vector<FrameSlice> slices;
  for (const MediaPixels* it : items) slices.push_back({it, 0, item_frames(*it)});
  encode_frames(slices, out, s);
}

std::vector<std::vector<FrameSlice>> CudaQwen2VisionRunner::frame_groups(std::span<const FrameSlice> slices) const {
  // Groups of whole frames (temporal slices of the grids), each at most group_patches_ patches
  // (or one frame), in the slices' order: greedy, a new group when the next frame does not fit.
  // Restarted at a group's first piece, the same greedy makes the same groups (the data-parallel
  // encoder hands a device the pieces of consecutive groups).
  const int64_t K = host_.config().patch_dim();
  std::vector<std::vector<FrameSlice>> groups(1);
  int64_t in_group = 0;
  for (const FrameSlice& f : slices) {
    const MediaPixels* it = f.item;
    const std::array<int32_t, 3>& g = it->grid_thw;
    VLM_CHECK(it->is_frames8() || static_cast<int64_t>(it->data.size()) == cost(*it) * K,
              "item of {} values for grid {}x{}x{}", it->data.size(), g[0], g[1], g[2]);
    VLM_CHECK(0 <= f.t0 && f.t0 < f.t1 && f.t1 <= g[0], "frames {}..{} of {}", f.t0, f.t1, g[0]);
    const int64_t hw = static_cast<int64_t>(g[1]) * g[2];
    for (int32_t t = f.t0; t < f.t1;) {
      auto n = static_cast<int32_t>(std::min<int64_t>(f.t1 - t, (group_patches_ - in_group) / hw));
      if (n == 0 && in_group > 0) {
        groups.emplace_back();
        in_group = 0;
        continue;
      }
      n = std::max(n, 1);
      groups.back().push_back({it, t, t + n});
      in_group += n * hw;
      t += n;
    }
  }
  if (groups.back().empty()) groups.pop_back();  // no slices
  return groups;
}

void CudaQwen2VisionRunner::encode_frames(std::span<const FrameSlice> slices, float* out, cudaStream_t s) {
  const cuda::CudaDeviceGuard on(device_);
  const Qwen2VisionConfig& c = host_.config();
  const int64_t K = c.patch_dim(), unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size;
  struct Piece {
    const MediaPixels* item;
    int32_t t0;                   // its first temporal group
    std::array<int32_t, 3> grid;  // (groups, h, w)
  };
  std::vector<std::vector<Piece>> groups;
  int64_t total = 0;
  for (const std::vector<FrameSlice>& fg : frame_groups(slices)) {
    groups.emplace_back();
    for (const FrameSlice& f : fg) {
      const std::array<int32_t, 3>& g = f.item->grid_thw;
      groups.back().push_back({f.item, f.t0, {f.t1 - f.t0, g[1], g[2]}});
      total += static_cast<int64_t>(f.t1 - f.t0) * g[1] * g[2];
    }
  }
  VLM_CHECK(total <= reserved_, "vision call of {} patches > the {} reserved", total, reserved_);
  // A group's pixels go into pinned staging as dt, then one async copy on copy_ (after the
  // tower's earlier work on s), which the group's stream waits for; groups alternate between s
  // and side_ (lanes 0 and 1), each in its own rows of the reservation.
  const size_t e = dtype_size(dt_);
  VLM_CUDA_CHECK(cudaEventSynchronize(staged_));     // the previous call's copies have left staging_
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // and its metadata copies the pinned ints
  lanes_.ints().reset();
  VLM_CUDA_CHECK(cudaEventRecord(tower_free_, s));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(copy_, tower_free_));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(side_, tower_free_));
  int64_t row = 0, out_row = 0;
  std::vector<std::array<int32_t, 3>> grids;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const std::vector<Piece>& group = groups[gi];
    const int64_t first = row;
    grids.clear();
    for (const Piece& p : group) {
      const int64_t n = static_cast<int64_t>(p.grid[0]) * p.grid[1] * p.grid[2];
      const size_t at = static_cast<size_t>(row * K) * e;
      if (p.item->is_frames8()) {  // 8-bit frames: the rows made on the GPU, in copy_'s order
        frames_.rows(*p.item, p.t0, p.t0 + p.grid[0], pixels_.as<char>() + at, dt_, copy_);
      } else {
        const float* src = p.item->data.data() + static_cast<int64_t>(p.t0) * p.grid[1] * p.grid[2] * K;
        convert_from_f32(src, dt_, staging_.as<char>() + at, n * K);
        VLM_CUDA_CHECK(cudaMemcpyAsync(pixels_.as<char>() + at, staging_.as<char>() + at, static_cast<size_t>(n * K) * e,
                                       cudaMemcpyHostToDevice, copy_));
      }
      grids.push_back(p.grid);
      row += n;
    }
    const size_t off = static_cast<size_t>(first * K) * e;
    VLM_CUDA_CHECK(cudaEventRecord(uploaded_, copy_));
    const bool side = gi % 2 == 1;
    cudaStream_t gs = side ? side_ : s;
    VLM_CUDA_CHECK(cudaStreamWaitEvent(gs, uploaded_));
    run_grids(grids, pixels_.as<char>() + off, dt_, out + out_row * c.out_hidden_size, gs, side ? 1 : 0, first);
    out_row += (row - first) / unit;
  }
  VLM_CUDA_CHECK(cudaEventRecord(staged_, copy_));
  VLM_CUDA_CHECK(cudaEventRecord(side_done_, side_));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(s, side_done_));
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

void CudaQwen2VisionRunner::run_grids(std::span<const std::array<int32_t, 3>> grids, const void* pixels,
                                      DType pixel_dt, float* out, cudaStream_t s, int lane, int64_t row0) {
  const Qwen2VisionConfig& c = host_.config();
  const int64_t unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size;
  const Qwen2VisionLayout lay = host_.layout(grids);
  const int64_t P = lay.num_patches;
  VLM_CHECK(row0 % unit == 0 && row0 + P <= reserved_, "vision rows {}..{} > the {} reserved", row0, row0 + P,
            reserved_);
  CudaStep& st = lanes_.step(lane, tower_->plan(lay), row0, P, s);
  lanes_.ints().new_step();  // this layout's arrays (an earlier group's may have had their addresses)
  tower_->forward(st, Act{const_cast<void*>(pixels), P, c.patch_dim(), pixel_dt}, lay,
                  Act{out, P / unit, c.out_hidden_size, DType::F32});
}

}  // namespace vlm
