// Rotary position embedding (kernels/ops/rope.h).
//
// Sources, restated in our own words (no code taken): Hugging Face transformers,
// src/transformers/modeling_rope_utils.py (the _compute_*_parameters functions) for inv_freq and
// the attention factor, and LlamaRotaryEmbedding / apply_rotary_pos_emb in modeling_llama.py for
// how cos/sin are formed and applied. transformers does all of this with float32 tensors, so we
// round at the same steps:
//  - default: e_i = f32(2i) / f32(dim) (f32 division), p_i = f32(theta)^e_i rounded to f32,
//    inv_freq_i = 1 / p_i in f32, i in [0, dim/2), dim = rotary_dim.
//  - linear: inv_freq_i / f32(factor).
//  - llama3 (Llama 3.1 bands): wavelen_i = f32(2 pi) / inv_freq_i; wavelengths above
//    orig / low_freq_factor get inv_freq / factor; those in [orig / high_freq_factor,
//    orig / low_freq_factor] blend with s = (orig / wavelen - low) / (high - low):
//    (1 - s) * inv / factor + s * inv; shorter wavelengths stay. All of it in f32.
//  - yarn: extrapolated inv = 1 / p_i, interpolated inv = 1 / (factor * p_i). The correction
//    range comes from the rotation-count inverse d(r) = dim * ln(orig / (2 pi r)) / (2 ln theta)
//    (double): low = d(beta_fast), high = d(beta_slow), floored / ceiled when `truncate`, then
//    clamped to [0, dim - 1]; if low == high, high += 0.001. The ramp is
//    clamp((f32(i) - low) / (high - low), 0, 1) over i in [0, dim/2); with
//    extrapolation weight w = 1 - ramp, inv = inter * (1 - w) + extra * w (f32).
//    Attention factor: the configured one, else mscale(factor, mscale) /
//    mscale(factor, mscale_all_dim) when both are set (non-zero), else mscale(factor, 1), where
//    mscale(s, m) = 1 for s <= 1, else 0.1 * m * ln(s) + 1.
//  - apply: angle = f32(position) * inv_freq_i in f32; cos/sin of that angle (here in double,
//    rounded to f32) times f32(attention_factor); emb repeats the dim/2 values twice; per head
//    x_rot = x * cos + rotate_half(x) * sin with rotate_half(x) = (-x2, x1), i.e.
//    (x1 c - x2 s, x2 c + x1 s), each product rounded before the sum. Dims past rotary_dim pass
//    through unchanged.
#include "kernels/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/core/check.h"
#include "kernels/ops/row_kernels.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::Default: return "default";
    case RopeType::Linear: return "linear";
    case RopeType::Llama3: return "llama3";
    case RopeType::Yarn: return "yarn";
  }
  return "unknown";
}

namespace {

// theta^(-2i/dim) the way transformers rounds it (see the top of the file).
std::vector<float> default_inv_freq(double theta, int dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  const float base = static_cast<float>(theta);
  for (int i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(e)));
    inv[i] = 1.0f / p;
  }
  return inv;
}

void apply_llama3(const RopeConfig& c, std::vector<float>& inv) {
  const float factor = static_cast<float>(c.factor);
  const float low = static_cast<float>(c.low_freq_factor);
  const float orig = static_cast<float>(c.original_max_position);
  const float low_wavelen = static_cast<float>(c.original_max_position / c.low_freq_factor);
  const float high_wavelen = static_cast<float>(c.original_max_position / c.high_freq_factor);
  const float band = static_cast<float>(c.high_freq_factor - c.low_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv) {
    const float wavelen = two_pi / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float s = (orig / wavelen - low) / band;
    const float a = (1.0f - s) * scaled;
    const float b = s * scaled;
    const float smoothed = a / factor + b;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
}

double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

// Fills inv [dim/2] with YaRN's blend of the two frequency sets; returns the attention factor.
double apply_yarn(const RopeConfig& c, int dim, std::vector<float>& inv) {
  const double base = c.theta;
  const double orig = static_cast<double>(c.original_max_position);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers does, to avoid dividing by zero
  const float low_f = static_cast<float>(low), span = static_cast<float>(high - low);
  const float factor = static_cast<float>(c.factor);
  const float base_f = static_cast<float>(base);
  for (int i = 0; i < dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(base_f), static_cast<double>(e)));
    const float extra = 1.0f / p;
    const float inter = 1.0f / (factor * p);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float w_extra = 1.0f - ramp;
    const float a = inter * (1.0f - w_extra);
    const float b = extra * w_extra;
    inv[static_cast<size_t>(i)] = a + b;
  }
  if (c.attention_factor > 0.0) return c.attention_factor;
  if (c.mscale != 0.0 && c.mscale_all_dim != 0.0)
    return yarn_mscale(c.factor, c.mscale) / yarn_mscale(c.factor, c.mscale_all_dim);
  return yarn_mscale(c.factor, 1.0);
}

// cos/sin of f32(position) * inv_freq, times the attention factor (see the top of the file).
inline void cos_sin(const std::vector<float>& inv, float scaling, int32_t position, float* cos_out,
                    float* sin_out) {
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < inv.size(); ++i) {
    const double angle = pos * inv[i];  // the f32 product, widened
    cos_out[i] = static_cast<float>(std::cos(angle)) * scaling;
    sin_out[i] = static_cast<float>(std::sin(angle)) * scaling;
  }
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const RopeConfig& cfg) : cfg_(cfg) {
  if (cfg_.rotary_dim == 0) cfg_.rotary_dim = cfg_.head_dim;
  const int dim = cfg_.rotary_dim;
  VLM_CHECK(cfg_.head_dim > 0, "rope head_dim {}", cfg_.head_dim);
  VLM_CHECK(dim > 0 && dim <= cfg_.head_dim && dim % 2 == 0,
            "rope rotary_dim {} must be even and in (0, head_dim={}]", dim, cfg_.head_dim);
  VLM_CHECK(cfg_.theta > 0.0 && cfg_.theta != 1.0, "rope theta {}", cfg_.theta);
  if (cfg_.type != RopeType::Default)
    VLM_CHECK(cfg_.factor > 0.0, "rope {} factor {}", rope_type_name(cfg_.type), cfg_.factor);
  if (cfg_.type == RopeType::Llama3 || cfg_.type == RopeType::Yarn)
    VLM_CHECK(cfg_.original_max_position > 0, "rope {} needs original_max_position, got {}",
              rope_type_name(cfg_.type), cfg_.original_max_position);
  if (cfg_.type == RopeType::Llama3)
    VLM_CHECK(cfg_.low_freq_factor > 0.0 && cfg_.high_freq_factor > cfg_.low_freq_factor,
              "rope llama3 needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
              cfg_.low_freq_factor, cfg_.high_freq_factor);
  if (cfg_.type == RopeType::Yarn)
    VLM_CHECK(cfg_.beta_fast > 0.0 && cfg_.beta_slow > 0.0, "rope yarn betas {} {}",
              cfg_.beta_fast, cfg_.beta_slow);

  inv_freq_ = default_inv_freq(cfg_.theta, dim);
  double attention = 1.0;
  switch (cfg_.type) {
    case RopeType::Default: break;
    case RopeType::Linear: {
      const float factor = static_cast<float>(cfg_.factor);
      for (float& f : inv_freq_) f = f / factor;
      break;
    }
    case RopeType::Llama3: apply_llama3(cfg_, inv_freq_); break;
    case RopeType::Yarn: attention = apply_yarn(cfg_, dim, inv_freq_); break;
  }
  attention_scaling_ = static_cast<float>(attention);
}

namespace {

// Tokens per thread-pool task: each token costs two trig calls per frequency (tens of ns each)
// when cos/sin are computed, plus the rotations of all its heads.
int64_t token_grain(int64_t heads, int64_t half, bool trig) {
  const int64_t per_token = heads * 2 * half + (trig ? 64 * half : 0);
  return std::max<int64_t>(1, 32 * 1024 / std::max<int64_t>(1, per_token));
}

template <typename Fn>
void for_tokens(int64_t T, int64_t grain, const Fn& fn) {
  if (T <= grain) {
    fn(int64_t{0}, T);
  } else {
    global_thread_pool().parallel_for(T, fn, grain);
  }
}

}  // namespace

void RotaryEmbedding::apply(float* q, int64_t num_q_heads, float* k, int64_t num_k_heads,
                            const int32_t* positions, int64_t T) const {
  VLM_CHECK(T >= 0 && num_q_heads >= 0 && num_k_heads >= 0, "rope apply T={} H={} Hkv={}", T,
            num_q_heads, num_k_heads);
  const int64_t D = cfg_.head_dim, half = cfg_.rotary_dim / 2;
  const RowKernels& kern = row_kernels();
  for_tokens(T, token_grain(num_q_heads + num_k_heads, half, true), [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    float* c = cs.data();
    float* s = c + half;
    for (int64_t t = t0; t < t1; ++t) {
      cos_sin(inv_freq_, attention_scaling_, positions[t], c, s);
      for (int64_t h = 0; h < num_q_heads; ++h)
        kern.rotate_half(q + (t * num_q_heads + h) * D, c, s, half);
      for (int64_t h = 0; h < num_k_heads; ++h)
        kern.rotate_half(k + (t * num_k_heads + h) * D, c, s, half);
    }
  });
}

void RotaryEmbedding::cos_sin_table(const int32_t* positions, int64_t T, float* table) const {
  VLM_CHECK(T >= 0, "rope cos_sin_table T={}", T);
  const int64_t half = cfg_.rotary_dim / 2;
  for_tokens(T, token_grain(0, half, true), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = table + t * 2 * half;
      cos_sin(inv_freq_, attention_scaling_, positions[t], row, row + half);
    }
  });
}

int RotaryEmbedding::mrope_axis(int64_t i) const {
  const int64_t half = cfg_.rotary_dim / 2;
  const std::vector<int>& s = cfg_.mrope_section;
  VLM_CHECK(s.size() == 3, "M-RoPE needs 3 sections, have {}", s.size());
  VLM_CHECK(s[0] >= 0 && s[1] >= 0 && s[2] >= 0 && s[0] + s[1] + s[2] == half,
            "mrope_section [{}, {}, {}] must be non-negative and sum to rotary_dim / 2 = {}", s[0], s[1], s[2],
            half);
  VLM_CHECK(i >= 0 && i < half, "M-RoPE frequency {} of {}", i, half);
  if (cfg_.mrope_interleaved) {
    // T H W T H W ...: slots 1, 4, 7, ... below 3 * s1 are h, slots 2, 5, 8, ... below 3 * s2 are w.
    if (i % 3 == 1 && i < 3 * int64_t{s[1]}) return 1;
    if (i % 3 == 2 && i < 3 * int64_t{s[2]}) return 2;
    return 0;
  }
  if (i < s[0]) return 0;
  return i < s[0] + s[1] ? 1 : 2;
}

void RotaryEmbedding::cos_sin_table_mrope(const int32_t* positions, int64_t T, float* table) const {
  const int64_t half = cfg_.rotary_dim / 2;
  std::vector<int> axis(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) axis[static_cast<size_t>(i)] = mrope_axis(i);
  for_tokens(T, token_grain(0, half, true), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* c = table + t * 2 * half;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t * 3 + axis[static_cast<size_t>(i)]]) * inv_freq_[static_cast<size_t>(i)];
        c[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling_;
        c[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling_;
      }
    }
  });
}

void RotaryEmbedding::apply_cached(float* q, int64_t num_q_heads, float* k, int64_t num_k_heads,
                                   const float* table, int64_t T) const {
  VLM_CHECK(T >= 0 && num_q_heads >= 0 && num_k_heads >= 0, "rope apply T={} H={} Hkv={}", T,
            num_q_heads, num_k_heads);
  const int64_t D = cfg_.head_dim, half = cfg_.rotary_dim / 2;
  const RowKernels& kern = row_kernels();
  for_tokens(T, token_grain(num_q_heads + num_k_heads, half, false), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = table + t * 2 * half;
      const float* s = c + half;
      for (int64_t h = 0; h < num_q_heads; ++h)
        kern.rotate_half(q + (t * num_q_heads + h) * D, c, s, half);
      for (int64_t h = 0; h < num_k_heads; ++h)
        kern.rotate_half(k + (t * num_k_heads + h) * D, c, s, half);
    }
  });
}

void RotaryEmbedding::apply_ref(float* q, int64_t num_q_heads, float* k, int64_t num_k_heads,
                                const int32_t* positions, int64_t T) const {
  const int64_t D = cfg_.head_dim;
  const int64_t half = cfg_.rotary_dim / 2;
  auto rotate = [&](float* x, int32_t position) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(position) * inv_freq_[static_cast<size_t>(i)];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling_;
      const float s = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling_;
      const float x1 = x[i], x2 = x[i + half];
      const float x1c = x1 * c, x2s = x2 * s, x2c = x2 * c, x1s = x1 * s;
      x[i] = x1c - x2s;
      x[i + half] = x2c + x1s;
    }
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < num_q_heads; ++h) rotate(q + (t * num_q_heads + h) * D, positions[t]);
    for (int64_t h = 0; h < num_k_heads; ++h) rotate(k + (t * num_k_heads + h) * D, positions[t]);
  }
}

}  // namespace vlm
