// DecoderFootprint: the bytes a dense decoder's weights take on one GPU in each load form, from
// its config alone (the tensors llama_layer_spec names, model/arch/llama_decoder.h), and its
// paged KV cache's bytes. For planning what fits (a 72B model in FP8 on one 141 GB H200:
// tests/model/decoder/test_dummy_weights.cpp) without loading anything.
#pragma once

#include <cstdint>

#include "model/decoder/model_config.h"

namespace vlm {

struct DecoderFootprint {
  int64_t linear_params = 0;  // the layers' q, k, v, o, gate, up, down matrices (FP8 under --quantization fp8)
  int64_t linear_rows = 0;    // their output rows (one f32 scale each in FP8)
  int64_t other_params = 0;   // embedding, untied LM head, norms, biases (kept 16-bit)
  int64_t params() const { return linear_params + other_params; }
  // bf16 (fp8 false): 2 bytes a parameter. FP8: 1 byte a matrix element + a 4-byte scale a row,
  // 2 bytes for the rest (the LM head and embedding stay 16-bit on the GPU).
  int64_t bytes(bool fp8) const { return fp8 ? linear_params + 4 * linear_rows + 2 * other_params : 2 * params(); }
};

// Precondition: a dense decoder (no mixture-of-experts layers; InternalError otherwise).
DecoderFootprint decoder_footprint(const ModelConfig& c);

// The KV cache of `tokens` cached tokens: 2 (K, V) x layers x KV heads x head_dim x bytes_per_value.
int64_t kv_cache_bytes(const ModelConfig& c, int64_t tokens, int64_t bytes_per_value);

}  // namespace vlm
