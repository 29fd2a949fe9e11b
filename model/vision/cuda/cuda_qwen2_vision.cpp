#include "model/vision/cuda/cuda_qwen2_vision.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"

namespace vlm {

using cuda::upload_converted;


namespace {

// Metadata ints of a call: gather index [P], positions [2P], frame cu, window cu, scatter [U].
int64_t meta_ints(int64_t P, int64_t unit) { return P + 2 * P + (P + 1) + (P + 1) + P / unit; }

}  // namespace

int64_t qwen2_vision_workspace_bytes(const Qwen2VisionConfig& c, int64_t P, DType dt) {
  const auto e = static_cast<int64_t>(dtype_size(dt));
  const int64_t C = c.hidden_size, I = c.intermediate_size, K = c.patch_dim(), D = c.head_dim();
  const int64_t unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size, U = P / unit;
  const int64_t mlp = c.qwen25 ? 2 * I * e + I * e : I * e;  // f (and silu * up)
  return P * K * 4 + P * K * e +               // pixels (f32 upload), patches (dt, run order)
         P * C * 4 + 3 * P * C * e +           // x, h, attn (dt)
         P * 3 * C * e + P * mlp +             // qkv, MLP
         P * D * 4 +                           // rotary table
         U * C * unit * e + U * c.out_hidden_size * 4 +  // merger hidden, merger output
         2 * meta_ints(P, unit) * 4;           // metadata (device and pinned host)
}

CudaQwen2Vision::CudaQwen2Vision(const Qwen2VisionEncoder& host, DType dt) : host_(host), dt_(dt) {
  VLM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16, "GPU vision dtype {}", dtype_name(dt));
  const bool q25 = host.config().qwen25;
  int64_t& b = weight_bytes_;
  patch_w_ = upload_converted({host.patch_weight()}, dt, &b);
  for (const Qwen2VisionEncoder::Block& B : host.blocks()) {
    using Parts = std::vector<TensorView>;
    const VitBlockHost h{.norm1_w = B.norm1_w,
                         .norm1_b = q25 ? TensorView() : B.norm1_b,
                         .norm2_w = B.norm2_w,
                         .norm2_b = q25 ? TensorView() : B.norm2_b,
                         .qkv = {B.qkv},
                         .qkv_b = {B.qkv_b},
                         .proj = B.proj,
                         .proj_b = B.proj_b,
                         .mlp_in = q25 ? Parts{B.gate, B.up} : Parts{B.fc1},
                         .mlp_in_b = q25 ? Parts{B.gate_b, B.up_b} : Parts{B.fc1_b},
                         .mlp_out = q25 ? B.down : B.fc2,
                         .mlp_out_b = q25 ? B.down_b : B.fc2_b};
    blocks_.push_back(upload_vit_block(h, dt, &b));
  }
  const Qwen2VisionEncoder::Merger m = host.merger();
  mnorm_w_ = upload_converted({m.norm_w}, DType::F32, &b);
  if (!q25) mnorm_b_ = upload_converted({m.norm_b}, DType::F32, &b);
  mlp0_ = upload_converted({m.mlp0}, dt, &b);
  mlp0_b_ = upload_converted({m.mlp0_b}, dt, &b);
  mlp2_ = upload_converted({m.mlp2}, dt, &b);
  mlp2_b_ = upload_converted({m.mlp2_b}, DType::F32, &b);
  inv_freq_ = upload_converted({cuda::f32_view(host.inv_freq())}, DType::F32, nullptr);
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&meta_done_, cudaEventDisableTiming));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&tower_free_, cudaEventDisableTiming));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
}

CudaQwen2Vision::~CudaQwen2Vision() {
  if (meta_done_) {
    cudaEventSynchronize(meta_done_);
    cudaEventDestroy(meta_done_);
  }
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  if (tower_free_) cudaEventDestroy(tower_free_);
  if (uploaded_) cudaEventDestroy(uploaded_);
  if (staged_) cudaEventDestroy(staged_);
  if (side_) {
    cudaStreamSynchronize(side_);
    cudaStreamDestroy(side_);
  }
  if (side_done_) cudaEventDestroy(side_done_);
}

int64_t CudaQwen2Vision::cost(const MediaPixels& item) const {
  return static_cast<int64_t>(item.grid_thw[0]) * item.grid_thw[1] * item.grid_thw[2];
}

int64_t CudaQwen2Vision::out_rows(const MediaPixels& item) const {
  const int64_t ms = host_.config().spatial_merge_size;
  return cost(item) / (ms * ms);
}

int64_t CudaQwen2Vision::workspace_bytes(int64_t max_cost) const {
  return qwen2_vision_workspace_bytes(host_.config(), max_cost, dt_) +
         CudaFramePreprocessor::workspace_bytes(host_.config().temporal_patch_size);  // Frames8 items' scratch
}

void CudaQwen2Vision::reserve(int64_t P) {
  const Qwen2VisionConfig& c = host_.config();
  const auto e = dtype_size(dt_);
  const auto n = static_cast<size_t>(P);
  const auto C = static_cast<size_t>(c.hidden_size), I = static_cast<size_t>(c.intermediate_size);
  const auto K = static_cast<size_t>(c.patch_dim()), D = static_cast<size_t>(c.head_dim());
  const int64_t unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size;
  const auto U = static_cast<size_t>(P / unit);
  meta_host_.resize(static_cast<size_t>(meta_ints(P, unit)) * 4);
  meta_dev_.resize(meta_host_.bytes());
  pixels_.resize(n * K * 4);
  staging_.resize(n * K * e);
  patches_.resize(n * K * e);
  x_.resize(n * C * 4);
  h_.resize(n * C * e);
  attn_.resize(n * C * e);
  qkv_.resize(n * 3 * C * e);
  f_.resize(n * (c.qwen25 ? 2 : 1) * I * e);
  if (c.qwen25) act_.resize(n * I * e);
  table_.resize(n * D * 4);
  m1_.resize(U * C * static_cast<size_t>(unit) * e);
  m2_.resize(U * static_cast<size_t>(c.out_hidden_size) * 4);
  frames_.reserve(c.temporal_patch_size);
  reserved_ = P;
}

void CudaQwen2Vision::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
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

void CudaQwen2Vision::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  std::vector<std::array<int32_t, 3>> grids;
  for (const MediaPixels* it : items) grids.push_back(it->grid_thw);
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // meta_host_ has left for the previous call
  run_grids(grids, pixels_.get(), DType::F32, out, s, {0, 0, &gemm_, &cudnn_});
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

void CudaQwen2Vision::encode(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  std::vector<FrameSlice> slices;
  for (const MediaPixels* it : items) slices.push_back({it, 0, item_frames(*it)});
  encode_frames(slices, out, s);
}

void CudaQwen2Vision::encode_frames(std::span<const FrameSlice> slices, float* out, cudaStream_t s) {
  // Groups of whole frames (temporal slices of the grids), each at most group_patches_ patches
  // (or one frame), in the slices' order: the rows of a group are contiguous in pixels and in out.
  const Qwen2VisionConfig& c = host_.config();
  const int64_t K = c.patch_dim(), unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size;
  struct Piece {
    const MediaPixels* item;
    int32_t t0;                   // its first temporal group
    std::array<int32_t, 3> grid;  // (groups, h, w)
  };
  std::vector<std::vector<Piece>> groups(1);
  int64_t in_group = 0, total = 0;
  for (const FrameSlice& f : slices) {
    const MediaPixels* it = f.item;
    const std::array<int32_t, 3>& g = it->grid_thw;
    VLM_CHECK(it->is_frames8() || static_cast<int64_t>(it->data.size()) == cost(*it) * K,
              "item of {} values for grid {}x{}x{}", it->data.size(), g[0], g[1], g[2]);
    VLM_CHECK(0 <= f.t0 && f.t0 < f.t1 && f.t1 <= g[0], "frames {}..{} of {}", f.t0, f.t1, g[0]);
    const int64_t hw = static_cast<int64_t>(g[1]) * g[2];
    total += (f.t1 - f.t0) * hw;
    for (int32_t t = f.t0; t < f.t1;) {
      auto n = static_cast<int32_t>(std::min<int64_t>(f.t1 - t, (group_patches_ - in_group) / hw));
      if (n == 0 && in_group > 0) {
        groups.emplace_back();
        in_group = 0;
        continue;
      }
      n = std::max(n, 1);
      groups.back().push_back({it, t, {n, g[1], g[2]}});
      in_group += n * hw;
      t += n;
    }
  }
  VLM_CHECK(total <= reserved_, "vision call of {} patches > the {} reserved", total, reserved_);
  // A group's pixels go into pinned staging as dt (what the tower's gather rounds them to anyway),
  // then one async copy on copy_ (after the tower's earlier work on s, which may still read
  // pixels_), which s waits for before the group's tower: the host converts the next group while
  // the GPU copies and runs this one.
  // Each group runs in its own rows of the workspace (the call's patches fit the reservation),
  // groups alternating between s and side_, so that one group's kernels fill the other's tails.
  const size_t e = dtype_size(dt_);
  VLM_CUDA_CHECK(cudaEventSynchronize(staged_));     // the previous call's copies have left staging_
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));  // and its metadata copies meta_host_
  VLM_CUDA_CHECK(cudaEventRecord(tower_free_, s));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(copy_, tower_free_));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(side_, tower_free_));
  int64_t row = 0, out_row = 0, meta = 0;
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
    meta += run_grids(grids, pixels_.as<char>() + off, dt_, out + out_row * c.out_hidden_size, gs,
                      {first, meta, side ? &side_gemm_ : &gemm_, side ? &side_cudnn_ : &cudnn_});
    out_row += (row - first) / unit;
  }
  VLM_CUDA_CHECK(cudaEventRecord(staged_, copy_));
  VLM_CUDA_CHECK(cudaEventRecord(side_done_, side_));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(s, side_done_));
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
}

int64_t CudaQwen2Vision::run_grids(std::span<const std::array<int32_t, 3>> grids, const void* pixels, DType pixel_dt,
                                   float* out, cudaStream_t s, const Lane& lane) {
  const Qwen2VisionConfig& c = host_.config();
  const int64_t C = c.hidden_size, K = c.patch_dim(), D = c.head_dim();
  const int64_t unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size, M = C * unit;
  const Qwen2VisionLayout lay = host_.layout(grids);
  const int64_t P = lay.num_patches, U = P / unit;
  VLM_CHECK(lane.row0 + P <= reserved_, "vision rows {}..{} > the {} reserved", lane.row0, lane.row0 + P, reserved_);
  const size_t e = dtype_size(dt_), r0 = static_cast<size_t>(lane.row0), u0 = static_cast<size_t>(lane.row0 / unit);

  // Metadata: one pinned copy from this lane's part of meta_host_ (free: the caller waited).
  auto* mh = meta_host_.as<int32_t>() + lane.meta0;
  int32_t* gather = mh;
  int32_t* pos = gather + P;
  int32_t* frame_cu = pos + 2 * P;
  int32_t* window_cu = frame_cu + lay.frame_cu.size();
  int32_t* scatter = window_cu + lay.window_cu.size();
  for (int64_t u = 0; u < U; ++u) {
    const int64_t src = lay.order[static_cast<size_t>(u)];
    for (int64_t m = 0; m < unit; ++m) gather[u * unit + m] = static_cast<int32_t>(src * unit + m);
    scatter[src] = static_cast<int32_t>(u);
  }
  std::memcpy(pos, lay.pos_hw.data(), lay.pos_hw.size() * 4);
  int max_frame = 0, max_window = 0, min_frame = INT32_MAX, min_window = INT32_MAX;
  for (size_t i = 0; i < lay.frame_cu.size(); ++i) {
    frame_cu[i] = static_cast<int32_t>(lay.frame_cu[i]);
    if (i) max_frame = std::max(max_frame, frame_cu[i] - frame_cu[i - 1]);
    if (i) min_frame = std::min(min_frame, frame_cu[i] - frame_cu[i - 1]);
  }
  for (size_t i = 0; i < lay.window_cu.size(); ++i) {
    window_cu[i] = static_cast<int32_t>(lay.window_cu[i]);
    if (i) max_window = std::max(max_window, window_cu[i] - window_cu[i - 1]);
    if (i) min_window = std::min(min_window, window_cu[i] - window_cu[i - 1]);
  }
  const size_t meta_bytes = static_cast<size_t>((scatter + U) - mh) * 4;
  const int32_t* d = meta_dev_.as<int32_t>() + lane.meta0;
  VLM_CUDA_CHECK(cudaMemcpyAsync(const_cast<int32_t*>(d), mh, meta_bytes, cudaMemcpyHostToDevice, s));
  const int32_t* d_gather = d;
  const int32_t* d_pos = d + P;
  const int32_t* d_frame = d_pos + 2 * P;
  const int32_t* d_window = d_frame + lay.frame_cu.size();
  const int32_t* d_scatter = d_window + lay.window_cu.size();
  const int num_frames = static_cast<int>(lay.frame_cu.size()) - 1, num_windows = static_cast<int>(lay.window_cu.size()) - 1;

  // This lane's rows of the workspace.
  const int64_t I = c.intermediate_size, Co = c.out_hidden_size;
  char* patches = patches_.as<char>() + r0 * K * e;
  auto* x = x_.as<float>() + r0 * C;
  auto* table = table_.as<float>() + r0 * D;
  cuda::CublasLtGemm& gemm = *lane.gemm;
  cuda::gather_rows(pixels, pixel_dt, d_gather, P, K, patches, dt_, K, 0, s);
  gemm.linear(patches, patch_w_.get(), dt_, nullptr, x, DType::F32, 0.0f, P, C, K, s);
  cuda::vision_rope_table(d_pos, inv_freq_.as<float>(), P, D, table, s);

  const VitBlockShape shape{.C = C, .I = I, .H = static_cast<int>(c.num_heads), .D = static_cast<int>(D),
                            .eps = static_cast<float>(c.norm_eps), .rms = c.qwen25, .gated = c.qwen25,
                            .act = cuda::Activation::QuickGelu};
  const VitBlockBuffers buf{x,
                            h_.as<char>() + r0 * C * e,
                            qkv_.as<char>() + r0 * 3 * C * e,
                            attn_.as<char>() + r0 * C * e,
                            f_.as<char>() + r0 * (c.qwen25 ? 2 : 1) * I * e,
                            c.qwen25 ? act_.as<char>() + r0 * I * e : nullptr};
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const bool full = host_.full_attention(static_cast<int64_t>(l));
    // Equal segments (every frame of a video group; windows rarely) may run through cuDNN.
    const VitSegments seg = full ? VitSegments{d_frame, num_frames, max_frame, min_frame == max_frame ? max_frame : 0,
                                               lane.cudnn}
                                 : VitSegments{d_window, num_windows, max_window,
                                               min_window == max_window ? max_window : 0, lane.cudnn};
    vit_block_forward(gemm, blocks_[l], shape, dt_, P, buf, seg, table, s);
  }
  // Merger over units [U, unit * Cv]; rows back to the prompt order straight into out.
  char* m1 = m1_.as<char>() + u0 * M * e;
  auto* m2 = m2_.as<float>() + u0 * Co;
  vit_norm(shape, mnorm_w_, mnorm_b_, dt_, P, x, buf.h, s);
  gemm.linear(buf.h, mlp0_.get(), dt_, mlp0_b_.get(), m1, dt_, 0.0f, U, M, M, s);
  cuda::activation(m1, dt_, U * M, cuda::Activation::GeluErf, s);
  gemm.linear(m1, mlp2_.get(), dt_, mlp2_b_.get(), m2, DType::F32, 0.0f, U, Co, M, s);
  cuda::gather_rows(m2, DType::F32, d_scatter, U, Co, out, DType::F32, Co, 0, s);
  return static_cast<int64_t>(meta_bytes / 4);
}

}  // namespace vlm
