#include "model/decoder/kv_cache_scales.h"

#include <cmath>

#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {

namespace {

// The [Hkv] scales of one tensor (a scalar broadcast to every head).
void read_scales(const TensorView& t, const std::string& name, int64_t Hkv, float* out) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw LoadError(fmt::format("KV cache scale {}: dtype {}, expected F32, BF16 or F16", name, dtype_name(t.dtype)));
  const int64_t n = t.numel();
  if (!(n == 1 && t.ndim() <= 1) && !(n == Hkv && t.ndim() == 1))
    throw LoadError(fmt::format("KV cache scale {}: {} values, expected a scalar or one per KV head ({})", name, n,
                                Hkv));
  for (int64_t h = 0; h < Hkv; ++h) {
    const float s = load_as_f32(t.data, t.dtype, n == 1 ? 0 : h);
    if (!std::isfinite(s) || s <= 0.0f)
      throw LoadError(fmt::format("KV cache scale {}: value {} (expected finite and positive)", name, s));
    out[h] = s;
  }
}

}  // namespace

KvCacheScales kv_cache_scales(const WeightStore& weights, const std::string& prefix, int64_t num_layers,
                              int64_t num_kv_heads) {
  KvCacheScales s;
  s.k.assign(static_cast<size_t>(num_layers * num_kv_heads), 1.0f);
  s.v = s.k;
  const auto& tensors = weights.tensors();
  for (int64_t l = 0; l < num_layers; ++l) {
    const std::string base = fmt::format("{}layers.{}.self_attn.", prefix, l);
    const auto k = tensors.find(base + "k_scale"), v = tensors.find(base + "v_scale");
    if (k == tensors.end() && v == tensors.end()) continue;
    if (k == tensors.end() || v == tensors.end())
      throw LoadError(fmt::format("KV cache scales: the checkpoint has {} but not {}",
                                  k == tensors.end() ? base + "v_scale" : base + "k_scale",
                                  k == tensors.end() ? base + "k_scale" : base + "v_scale"));
    read_scales(k->second, k->first, num_kv_heads, s.k.data() + l * num_kv_heads);
    read_scales(v->second, v->first, num_kv_heads, s.v.data() + l * num_kv_heads);
    ++s.layers_from_checkpoint;
  }
  return s;
}

}  // namespace vlm
