// Test helpers for the media paths: a random 8-bit RGB image, and bit-for-bit equality of f32 rows.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "model/media/image_decode.h"

namespace vlm {

// w x h RGB pixels, each channel uniform in [0, 255] from g.
inline RgbImage random_image(int w, int h, std::mt19937& g) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& p : img.pixels) p = static_cast<uint8_t>(d(g));
  return img;
}

// The same floats bit for bit (sizes included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace vlm
