#include "model/vision/cuda/cuda_qwen2_vision.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/core/check.h"
#include "kernels/cuda/attention/varlen_attention.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"

namespace vlm {

using cuda::upload_converted;

struct CudaQwen2Vision::Block {
  cuda::DeviceBuffer norm1_w, norm1_b, norm2_w, norm2_b;  // [Cv] f32 (biases: Qwen2-VL)
  cuda::DeviceBuffer qkv, qkv_b;                          // [3Cv, Cv] dt, [3Cv] dt
  cuda::DeviceBuffer proj, proj_b;                        // [Cv, Cv] dt, [Cv] f32
  cuda::DeviceBuffer mlp_in, mlp_in_b;                    // fc1 [Iv, Cv] or [gate; up] [2Iv, Cv], dt
  cuda::DeviceBuffer mlp_out, mlp_out_b;                  // [Cv, Iv] dt, [Cv] f32
};

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
    auto g = std::make_unique<Block>();
    g->norm1_w = upload_converted({B.norm1_w}, DType::F32, &b);
    g->norm2_w = upload_converted({B.norm2_w}, DType::F32, &b);
    if (!q25) {
      g->norm1_b = upload_converted({B.norm1_b}, DType::F32, &b);
      g->norm2_b = upload_converted({B.norm2_b}, DType::F32, &b);
    }
    g->qkv = upload_converted({B.qkv}, dt, &b);
    g->qkv_b = upload_converted({B.qkv_b}, dt, &b);
    g->proj = upload_converted({B.proj}, dt, &b);
    g->proj_b = upload_converted({B.proj_b}, DType::F32, &b);
    if (q25) {
      g->mlp_in = upload_converted({B.gate, B.up}, dt, &b);
      g->mlp_in_b = upload_converted({B.gate_b, B.up_b}, dt, &b);
      g->mlp_out = upload_converted({B.down}, dt, &b);
      g->mlp_out_b = upload_converted({B.down_b}, DType::F32, &b);
    } else {
      g->mlp_in = upload_converted({B.fc1}, dt, &b);
      g->mlp_in_b = upload_converted({B.fc1_b}, dt, &b);
      g->mlp_out = upload_converted({B.fc2}, dt, &b);
      g->mlp_out_b = upload_converted({B.fc2_b}, DType::F32, &b);
    }
    blocks_.push_back(std::move(g));
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
}

CudaQwen2Vision::~CudaQwen2Vision() {
  if (meta_done_) {
    cudaEventSynchronize(meta_done_);
    cudaEventDestroy(meta_done_);
  }
}

int64_t CudaQwen2Vision::cost(const MediaPixels& item) const {
  return static_cast<int64_t>(item.grid_thw[0]) * item.grid_thw[1] * item.grid_thw[2];
}

int64_t CudaQwen2Vision::out_rows(const MediaPixels& item) const {
  const int64_t ms = host_.config().spatial_merge_size;
  return cost(item) / (ms * ms);
}

int64_t CudaQwen2Vision::workspace_bytes(int64_t max_cost) const {
  return qwen2_vision_workspace_bytes(host_.config(), max_cost, dt_);
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
  reserved_ = P;
}

void CudaQwen2Vision::norm(const cuda::DeviceBuffer& w, const cuda::DeviceBuffer& b, int64_t P, cudaStream_t s) {
  const Qwen2VisionConfig& c = host_.config();
  const auto eps = static_cast<float>(c.norm_eps);
  if (c.qwen25) cuda::rms_norm(x_.as<float>(), nullptr, w.as<float>(), eps, nullptr, P, c.hidden_size, h_.get(), dt_, s);
  else cuda::layer_norm(x_.as<float>(), w.as<float>(), b.as<float>(), eps, P, c.hidden_size, h_.get(), dt_, s);
}

void CudaQwen2Vision::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
  const int64_t K = host_.config().patch_dim();
  int64_t row = 0;
  for (const MediaPixels* it : items) {
    VLM_CHECK(static_cast<int64_t>(it->data.size()) == cost(*it) * K, "item of {} values for grid {}x{}x{}",
              it->data.size(), it->grid_thw[0], it->grid_thw[1], it->grid_thw[2]);
    VLM_CHECK(row + cost(*it) <= reserved_, "vision call beyond the {} patches reserved", reserved_);
    VLM_CUDA_CHECK(cudaMemcpyAsync(pixels_.as<float>() + row * K, it->data.data(), it->data.size() * 4,
                                   cudaMemcpyHostToDevice, s));
    row += cost(*it);
  }
}

void CudaQwen2Vision::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const Qwen2VisionConfig& c = host_.config();
  const int64_t C = c.hidden_size, I = c.intermediate_size, K = c.patch_dim(), D = c.head_dim();
  const int64_t unit = static_cast<int64_t>(c.spatial_merge_size) * c.spatial_merge_size, M = C * unit;
  const int H = static_cast<int>(c.num_heads);
  std::vector<std::array<int32_t, 3>> grids;
  for (const MediaPixels* it : items) grids.push_back(it->grid_thw);
  const Qwen2VisionLayout lay = host_.layout(grids);
  const int64_t P = lay.num_patches, U = P / unit;
  VLM_CHECK(P <= reserved_, "vision call of {} patches > the {} reserved", P, reserved_);

  // Metadata: one pinned copy (wait until the previous call's copy has left the buffer).
  VLM_CUDA_CHECK(cudaEventSynchronize(meta_done_));
  auto* mh = meta_host_.as<int32_t>();
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
  int max_frame = 0, max_window = 0;
  for (size_t i = 0; i < lay.frame_cu.size(); ++i) {
    frame_cu[i] = static_cast<int32_t>(lay.frame_cu[i]);
    if (i) max_frame = std::max(max_frame, frame_cu[i] - frame_cu[i - 1]);
  }
  for (size_t i = 0; i < lay.window_cu.size(); ++i) {
    window_cu[i] = static_cast<int32_t>(lay.window_cu[i]);
    if (i) max_window = std::max(max_window, window_cu[i] - window_cu[i - 1]);
  }
  const size_t meta_bytes = static_cast<size_t>((scatter + U) - mh) * 4;
  VLM_CUDA_CHECK(cudaMemcpyAsync(meta_dev_.get(), mh, meta_bytes, cudaMemcpyHostToDevice, s));
  VLM_CUDA_CHECK(cudaEventRecord(meta_done_, s));
  const int32_t* d = meta_dev_.as<int32_t>();
  const int32_t* d_gather = d;
  const int32_t* d_pos = d + P;
  const int32_t* d_frame = d_pos + 2 * P;
  const int32_t* d_window = d_frame + lay.frame_cu.size();
  const int32_t* d_scatter = d_window + lay.window_cu.size();
  const int num_frames = static_cast<int>(lay.frame_cu.size()) - 1, num_windows = static_cast<int>(lay.window_cu.size()) - 1;

  cuda::gather_rows(pixels_.get(), DType::F32, d_gather, P, K, patches_.get(), dt_, K, 0, s);
  gemm_.linear(patches_.get(), patch_w_.get(), dt_, nullptr, x_.get(), DType::F32, 0.0f, P, C, K, s);
  cuda::vision_rope_table(d_pos, inv_freq_.as<float>(), P, D, table_.as<float>(), s);

  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const size_t e = dtype_size(dt_);
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& B = *blocks_[l];
    const bool full = host_.full_attention(static_cast<int64_t>(l));
    norm(B.norm1_w, B.norm1_b, P, s);
    gemm_.linear(h_.get(), B.qkv.get(), dt_, B.qkv_b.get(), qkv_.get(), dt_, 0.0f, P, 3 * C, C, s);
    cuda::vision_rope_qk(qkv_.get(), dt_, P, H, D, table_.as<float>(), s);
    const char* qkv = qkv_.as<char>();
    cuda::varlen_attention(qkv, qkv + C * e, qkv + 2 * C * e, 3 * C, dt_, H, static_cast<int>(D),
                           full ? d_frame : d_window, full ? num_frames : num_windows, full ? max_frame : max_window,
                           scale, attn_.get(), s);
    gemm_.linear(attn_.get(), B.proj.get(), dt_, B.proj_b.get(), x_.get(), DType::F32, 1.0f, P, C, C, s);
    norm(B.norm2_w, B.norm2_b, P, s);
    if (c.qwen25) {
      gemm_.linear(h_.get(), B.mlp_in.get(), dt_, B.mlp_in_b.get(), f_.get(), dt_, 0.0f, P, 2 * I, C, s);
      cuda::silu_mul(f_.get(), P, I, act_.get(), dt_, s);
      gemm_.linear(act_.get(), B.mlp_out.get(), dt_, B.mlp_out_b.get(), x_.get(), DType::F32, 1.0f, P, C, I, s);
    } else {
      gemm_.linear(h_.get(), B.mlp_in.get(), dt_, B.mlp_in_b.get(), f_.get(), dt_, 0.0f, P, I, C, s);
      cuda::activation(f_.get(), dt_, P * I, cuda::Activation::QuickGelu, s);
      gemm_.linear(f_.get(), B.mlp_out.get(), dt_, B.mlp_out_b.get(), x_.get(), DType::F32, 1.0f, P, C, I, s);
    }
  }
  // Merger over units [U, unit * Cv]; rows back to the prompt order straight into out.
  norm(mnorm_w_, mnorm_b_, P, s);
  gemm_.linear(h_.get(), mlp0_.get(), dt_, mlp0_b_.get(), m1_.get(), dt_, 0.0f, U, M, M, s);
  cuda::activation(m1_.get(), dt_, U * M, cuda::Activation::GeluErf, s);
  const int64_t Co = c.out_hidden_size;
  gemm_.linear(m1_.get(), mlp2_.get(), dt_, mlp2_b_.get(), m2_.get(), DType::F32, 0.0f, U, Co, M, s);
  cuda::gather_rows(m2_.get(), DType::F32, d_scatter, U, Co, out, DType::F32, Co, 0, s);
}

}  // namespace vlm
