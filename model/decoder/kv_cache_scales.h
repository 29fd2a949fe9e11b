// The FP8 KV cache's static scales (--kv-cache-dtype fp8, the GPU's F8_E4M3 cache;
// kernels/attention/paged_kv.h's convention: x stored as e4m3(x / scale), read as fp8 * scale).
// Policy: one scale per layer and KV head, fixed at load. From the checkpoint when it carries
// them under vLLM's names, `<prefix>layers.<l>.self_attn.k_scale` and `.v_scale` (a scalar, shape
// [] or [1], for all the layer's heads, or [Hkv] per head; written by calibration tools such as
// llm-compressor), else 1.0 -- vLLM's default without calibration: E4M3's range (+-448, 3 mantissa
// bits, normals down to 2^-6) holds post-RoPE keys and values unscaled. Never computed from the
// traffic: a scale fitted to one sequence would not hold for the next.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/decoder/weights.h"

namespace vlm {

struct KvCacheScales {
  std::vector<float> k, v;    // [L, Hkv] each
  int64_t layers_from_checkpoint = 0;  // layers whose scales the checkpoint gave (others: 1.0)
};

// Reads the scales of `num_layers` layers of `num_kv_heads` heads under `prefix` (the decoder's,
// e.g. "model."). Throws LoadError naming the tensor when a layer has one of k_scale/v_scale but
// not the other, a scale's shape is neither a scalar nor [Hkv], its dtype is not a float type, or
// a value is not finite and positive.
KvCacheScales kv_cache_scales(const WeightStore& weights, const std::string& prefix, int64_t num_layers,
                              int64_t num_kv_heads);

}  // namespace vlm
