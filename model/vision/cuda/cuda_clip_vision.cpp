#include "model/vision/cuda/cuda_clip_vision.h"

#include <algorithm>
#include <cmath>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"

namespace vlm {

using cuda::f32_view;
using cuda::upload_converted;


int64_t clip_vision_workspace_bytes(const ClipVisionConfig& c, int64_t num_features, int64_t out_features, int64_t N,
                                    bool drop_cls, DType dt) {
  const auto e = static_cast<int64_t>(dtype_size(dt));
  const int64_t C = c.hidden_size, I = c.intermediate_size, p = c.patch_size, S = c.image_size;
  const int64_t P = c.num_patches(), L = c.num_positions(), rows = L - (drop_cls ? 1 : 0);
  return N * 3 * S * S * 4 + N * P * 3 * p * p * e +  // pixels, patches
         N * P * C * 4 + N * L * C * 4 +              // patch embeddings, x
         N * L * C * e * 5 + N * L * I * e +          // h, qkv (3), attn; fc1
         N * rows * C * num_features * e + N * rows * out_features * e +  // projector input, hidden
         2 * N * rows * 4 + (N + 1) * 4 * 2;          // metadata (device and pinned host)
}

CudaClipVision::CudaClipVision(const ClipVisionEncoder& host, const LlavaProjector& projector,
                               std::vector<int> feature_layers, bool drop_cls, DType dt)
    : host_(host), projector_(projector), feature_layers_(std::move(feature_layers)), drop_cls_(drop_cls), dt_(dt) {
  VLM_CHECK(dt == DType::F32 || dt == DType::BF16 || dt == DType::F16, "GPU vision dtype {}", dtype_name(dt));
  const ClipVisionConfig& c = host.config();
  VLM_CHECK(!feature_layers_.empty(), "no vision feature layers");
  for (int l : feature_layers_)
    VLM_CHECK(l >= 0 && l <= static_cast<int>(host.layers().size()), "hidden state {} of {} loaded layers", l,
              host.layers().size());
  VLM_CHECK(!drop_cls || !c.siglip, "drop_cls on a tower without a class token");
  VLM_CHECK(projector.in_features() == c.hidden_size * static_cast<int64_t>(feature_layers_.size()),
            "projector input {} for {} hidden states of {}", projector.in_features(), feature_layers_.size(),
            c.hidden_size);
  rows_ = c.num_positions() - (drop_cls ? 1 : 0);
  int64_t& b = weight_bytes_;
  patch_w_ = upload_converted({host.patch_weight()}, dt, &b);
  if (!host.patch_bias().empty()) patch_b_ = upload_converted({f32_view(host.patch_bias())}, DType::F32, &b);
  if (!host.class_embedding().empty()) class_emb_ = upload_converted({f32_view(host.class_embedding())}, DType::F32, &b);
  pos_emb_ = upload_converted({f32_view(host.position_embedding())}, DType::F32, &b);
  if (!c.siglip) {
    pre_ln_w_ = upload_converted({host.pre_ln_weight()}, DType::F32, &b);
    pre_ln_b_ = upload_converted({host.pre_ln_bias()}, DType::F32, &b);
  }
  const int deepest = *std::max_element(feature_layers_.begin(), feature_layers_.end());
  for (int l = 0; l < deepest; ++l) {
    const ClipVisionEncoder::Layer& L = host.layers()[static_cast<size_t>(l)];
    layers_.push_back(upload_vit_block({.norm1_w = L.ln1_w, .norm1_b = L.ln1_b, .norm2_w = L.ln2_w,
                                        .norm2_b = L.ln2_b, .qkv = {L.q, L.k, L.v}, .qkv_b = {L.q_b, L.k_b, L.v_b},
                                        .proj = L.o, .proj_b = L.o_b, .mlp_in = {L.fc1}, .mlp_in_b = {L.fc1_b},
                                        .mlp_out = L.fc2, .mlp_out_b = L.fc2_b},
                                       dt, &b));
  }
  w1_ = upload_converted({projector.w1()}, dt, &b);
  w2_ = upload_converted({projector.w2()}, dt, &b);
  if (!projector.b1().empty()) b1_ = upload_converted({f32_view(projector.b1())}, dt, &b);
  if (!projector.b2().empty()) b2_ = upload_converted({f32_view(projector.b2())}, DType::F32, &b);
}

CudaClipVision::~CudaClipVision() = default;

int64_t CudaClipVision::workspace_bytes(int64_t N) const {
  return clip_vision_workspace_bytes(host_.config(), static_cast<int64_t>(feature_layers_.size()),
                                     projector_.out_features(), N, drop_cls_, dt_);
}

void CudaClipVision::reserve(int64_t N) {
  const ClipVisionConfig& c = host_.config();
  const auto e = dtype_size(dt_);
  const auto n = static_cast<size_t>(N);
  const auto C = static_cast<size_t>(c.hidden_size), I = static_cast<size_t>(c.intermediate_size);
  const auto P = static_cast<size_t>(c.num_patches()), L = static_cast<size_t>(c.num_positions());
  const auto S = static_cast<size_t>(c.image_size), p = static_cast<size_t>(c.patch_size);
  const auto rows = static_cast<size_t>(rows_);
  meta_host_.resize((n * rows + n + 1) * 4);
  meta_dev_.resize(meta_host_.bytes());
  pixels_.resize(n * 3 * S * S * 4);
  patches_.resize(n * P * 3 * p * p * e);
  pe_.resize(n * P * C * 4);
  x_.resize(n * L * C * 4);
  h_.resize(n * L * C * e);
  qkv_.resize(n * L * 3 * C * e);
  attn_.resize(n * L * C * e);
  f_.resize(n * L * I * e);
  feats_.resize(n * rows * C * feature_layers_.size() * e);
  p1_.resize(n * rows * static_cast<size_t>(projector_.out_features()) * e);
  reserved_ = N;
}

// The selected hidden state `hidden_index` (if selected) into its columns of the projector input.
void CudaClipVision::emit(int hidden_index, int64_t N, cudaStream_t s) {
  const int64_t C = host_.config().hidden_size, nf = static_cast<int64_t>(feature_layers_.size());
  for (int64_t j = 0; j < nf; ++j)
    if (feature_layers_[static_cast<size_t>(j)] == hidden_index)
      cuda::gather_rows(x_.get(), DType::F32, meta_dev_.as<int32_t>(), N * rows_, C, feats_.get(), dt_, C * nf, j * C,
                        s);
}

void CudaClipVision::upload_pixels(std::span<const MediaPixels* const> items, cudaStream_t s) {
  const int64_t S = host_.config().image_size;
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

void CudaClipVision::run(std::span<const MediaPixels* const> items, float* out, cudaStream_t s) {
  const ClipVisionConfig& c = host_.config();
  const auto N = static_cast<int64_t>(items.size());
  VLM_CHECK(N > 0 && N <= reserved_, "vision call of {} images, {} reserved", N, reserved_);
  const int64_t C = c.hidden_size, I = c.intermediate_size, S = c.image_size, p = c.patch_size;
  const int64_t P = c.num_patches(), L = c.num_positions(), T = N * L, first = drop_cls_ ? 1 : 0;
  const int H = static_cast<int>(c.num_heads), D = static_cast<int>(c.head_dim());
  const auto eps = static_cast<float>(c.layer_norm_eps);

  // Metadata: the rows of x the projector reads [N * rows], then the images' cu_seqlens [N + 1].
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));  // meta_host_ may still be in an earlier copy
  auto* mh = meta_host_.as<int32_t>();
  for (int64_t r = 0; r < N * rows_; ++r) mh[r] = static_cast<int32_t>((r / rows_) * L + first + r % rows_);
  for (int64_t n = 0; n <= N; ++n) mh[N * rows_ + n] = static_cast<int32_t>(n * L);
  VLM_CUDA_CHECK(cudaMemcpyAsync(meta_dev_.get(), mh, static_cast<size_t>(N * rows_ + N + 1) * 4,
                                 cudaMemcpyHostToDevice, s));
  const int32_t* d_cu = meta_dev_.as<int32_t>() + N * rows_;

  cuda::unfold_patches(pixels_.as<float>(), N, S, p, patches_.get(), dt_, s);
  gemm_.linear(patches_.get(), patch_w_.get(), dt_, nullptr, pe_.get(), DType::F32, 0.0f, N * P, C, 3 * p * p, s);
  cuda::clip_embed(pe_.as<float>(), class_emb_.as<float>(), patch_b_.as<float>(), pos_emb_.as<float>(), N, P, L, C,
                   x_.as<float>(), s);
  if (!c.siglip) cuda::layer_norm(x_.as<float>(), pre_ln_w_.as<float>(), pre_ln_b_.as<float>(), eps, T, C, x_.get(), DType::F32, s);
  emit(0, N, s);

  const cuda::Activation act = c.act == VisionActivation::QuickGelu ? cuda::Activation::QuickGelu
                               : c.act == VisionActivation::GeluTanh ? cuda::Activation::GeluTanh
                                                                     : cuda::Activation::GeluErf;
  const VitBlockShape shape{.C = C, .I = I, .H = H, .D = D, .eps = eps, .rms = false, .gated = false, .act = act};
  const VitBlockBuffers buf{x_.as<float>(), h_.get(), qkv_.get(), attn_.get(), f_.get(), nullptr};
  for (size_t l = 0; l < layers_.size(); ++l) {
    const VitSegments seg{d_cu, static_cast<int>(N), static_cast<int>(L), static_cast<int>(L), &cudnn_};  // equal
    vit_block_forward(gemm_, layers_[l], shape, dt_, T, buf, seg, nullptr, s);
    emit(static_cast<int>(l) + 1, N, s);
  }
  const int64_t R = N * rows_, Ct = projector_.out_features(), Fin = projector_.in_features();
  gemm_.linear(feats_.get(), w1_.get(), dt_, b1_.get(), p1_.get(), dt_, 0.0f, R, Ct, Fin, s);
  cuda::activation(p1_.get(), dt_, R * Ct, cuda::Activation::GeluErf, s);
  gemm_.linear(p1_.get(), w2_.get(), dt_, b2_.get(), out, DType::F32, 0.0f, R, Ct, Ct, s);
}

}  // namespace vlm
