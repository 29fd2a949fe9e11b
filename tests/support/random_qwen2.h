// A random f32 Qwen2 checkpoint (config.json + model.safetensors) for GPU decoder tests that need
// head sizes the fixture models lack (the GPU's decode and block-sparse kernels take 64 / 128).
#pragma once

#include <cstdint>
#include <string>

namespace vlm::testing {

struct RandomQwen2 {
  int hidden = 256, intermediate = 256, layers = 4, heads = 4, kv_heads = 2, vocab = 512;  // head size hidden / heads
  int max_positions = 4096;
  uint32_t seed = 4;  // weights ~ N(0, 0.08^2) from std::mt19937(seed); norms 1; q/k/v biases
};

// Writes the checkpoint into a fresh directory `<temp>/<name>_<pid>` and returns its path (the
// caller removes it). The same shape and seed give the same bytes.
std::string write_random_qwen2(const std::string& name, const RandomQwen2& shape);

}  // namespace vlm::testing
