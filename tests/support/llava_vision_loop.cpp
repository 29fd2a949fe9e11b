#include "tests/support/llava_vision_loop.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention/dense_attention.h"
#include "kernels/core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/vision_ops.h"

namespace vlm::testing {

void clip_vision_loop(const ClipVisionEncoder& e, const float* pixels, int64_t N, std::span<const int> layers,
                      bool drop_cls, float* out) {
  const ClipVisionConfig& c = e.config();
  const std::vector<ClipVisionEncoder::Layer>& layers_ = e.layers();
  const TensorView& patch_w_ = e.patch_weight();
  const std::vector<float>& patch_b_ = e.patch_bias();
  const std::vector<float>& class_emb_ = e.class_embedding();
  const std::vector<float>& pos_emb_ = e.position_embedding();
  const int64_t C = c.hidden_size, I = c.intermediate_size, p = c.patch_size, S = c.image_size;
  const int64_t G = c.grid(), P = c.num_patches(), L = c.num_positions(), T = N * L;
  const int64_t cls = L - P;  // 1 (CLIP's class token) or 0 (SigLIP)
  const int H = static_cast<int>(c.num_heads), D = static_cast<int>(c.head_dim());
  const float eps = static_cast<float>(c.layer_norm_eps);
  VLM_CHECK(N > 0 && !layers.empty(), "encode N={} with {} layers", N, layers.size());
  VLM_CHECK(!drop_cls || cls == 1, "drop_cls on a tower without a class token");
  int deepest = 0;
  for (int l : layers) {
    VLM_CHECK(l >= 0 && l <= static_cast<int>(layers_.size()), "hidden state {} of {} loaded layers", l,
              layers_.size());
    deepest = std::max(deepest, l);
  }

  // Unfold the patches: row (n, gy, gx) holds [ch, ky, kx], the conv weight's layout.
  Tensor patches = Tensor::empty({N * P, 3 * p * p});
  float* pp = patches.as<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gy = 0; gy < G; ++gy)
      for (int64_t gx = 0; gx < G; ++gx) {
        float* row = pp + ((n * G + gy) * G + gx) * 3 * p * p;
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t ky = 0; ky < p; ++ky) {
            const float* src = pixels + ((n * 3 + ch) * S + gy * p + ky) * S + gx * p;
            std::copy(src, src + p, row + (ch * p + ky) * p);
          }
      }
  Tensor pe = Tensor::empty({N * P, C});
  linear(pp, N * P, patch_w_, patch_b_.empty() ? nullptr : patch_b_.data(), pe.as<float>());

  Tensor x = Tensor::empty({T, C});  // residual stream [N * L, Cv]
  float* xp = x.as<float>();
  for (int64_t n = 0; n < N; ++n) {
    if (cls)
      for (int64_t i = 0; i < C; ++i) xp[n * L * C + i] = class_emb_[i] + pos_emb_[i];
    for (int64_t t = cls; t < L; ++t)
      for (int64_t i = 0; i < C; ++i)
        xp[(n * L + t) * C + i] = pe.as<float>()[(n * P + t - cls) * C + i] + pos_emb_[t * C + i];
  }
  if (!c.siglip) layer_norm(xp, e.pre_ln_weight(), e.pre_ln_bias(), eps, T, xp);

  const int64_t first = drop_cls ? 1 : 0, rows = L - first;
  const int64_t out_c = C * static_cast<int64_t>(layers.size());
  auto emit = [&](int hidden_index) {
    for (size_t j = 0; j < layers.size(); ++j) {
      if (layers[j] != hidden_index) continue;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t t = 0; t < rows; ++t)
          std::copy(xp + (n * L + first + t) * C, xp + (n * L + first + t + 1) * C,
                    out + (n * rows + t) * out_c + static_cast<int64_t>(j) * C);
    }
  };
  emit(0);

  Tensor h = Tensor::empty({T, C}), q = Tensor::empty({T, C}), k = Tensor::empty({T, C});
  Tensor v = Tensor::empty({T, C}), attn = Tensor::empty({T, C}), f = Tensor::empty({T, I});
  float* hp = h.as<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int l = 0; l < deepest; ++l) {
    const ClipVisionEncoder::Layer& Ly = layers_[l];
    layer_norm(xp, Ly.ln1_w, Ly.ln1_b, eps, T, hp);
    linear(hp, T, Ly.q, Ly.q_b.as<const float>(), q.as<float>());
    linear(hp, T, Ly.k, Ly.k_b.as<const float>(), k.as<float>());
    linear(hp, T, Ly.v, Ly.v_b.as<const float>(), v.as<float>());
    dense_attention(q.as<float>(), k.as<float>(), v.as<float>(), N, L, H, D, scale, attn.as<float>());
    linear(attn.as<float>(), T, Ly.o, Ly.o_b.as<const float>(), hp);
    add_inplace(xp, hp, T * C);
    layer_norm(xp, Ly.ln2_w, Ly.ln2_b, eps, T, hp);
    linear(hp, T, Ly.fc1, Ly.fc1_b.as<const float>(), f.as<float>());
    if (c.act == VisionActivation::QuickGelu) quick_gelu(f.as<float>(), T * I);
    else if (c.act == VisionActivation::GeluTanh) gelu_tanh(f.as<float>(), T * I);
    else gelu_erf(f.as<float>(), T * I);
    linear(f.as<float>(), T, Ly.fc2, Ly.fc2_b.as<const float>(), hp);
    add_inplace(xp, hp, T * C);
    emit(l + 1);
  }
}

void llava_projector_loop(const LlavaProjector& p, const float* x, int64_t M, float* y) {
  const int64_t out_ = p.out_features();
  Tensor h = Tensor::empty({M, out_});
  linear(x, M, p.w1(), p.b1().empty() ? nullptr : p.b1().data(), h.as<float>());
  gelu_erf(h.as<float>(), M * out_);
  linear(h.as<float>(), M, p.w2(), p.b2().empty() ? nullptr : p.b2().data(), y);
}

void llava_encode_images_loop(const LlavaModel& m, const float* pixels, int64_t N, float* out) {
  const int64_t rows = N * m.tokens_per_image();
  Tensor feats = Tensor::empty({rows, m.projector().in_features()});
  clip_vision_loop(m.vision(), pixels, N, m.config().feature_layers, m.config().drop_cls, feats.as<float>());
  llava_projector_loop(m.projector(), feats.as<float>(), rows, out);
}

}  // namespace vlm::testing
