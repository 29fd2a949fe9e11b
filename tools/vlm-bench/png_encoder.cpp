#include "tools/vlm-bench/png_encoder.h"

#include <zlib.h>

#include <algorithm>
#include <random>
#include <stdexcept>

namespace vlm::bench {
namespace {

void put_u32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

// length, type, data, CRC-32 over type and data (PNG spec, section 5.3).
void put_chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.append(type, 4);
  out += data;
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(out.data() + type_at), static_cast<uInt>(4 + data.size()));
  put_u32(out, static_cast<uint32_t>(crc));
}

}  // namespace

std::string encode_png_rgb(const std::vector<uint8_t>& rgb, int width, int height, int level) {
  if (width <= 0 || height <= 0 || rgb.size() != static_cast<size_t>(width) * height * 3)
    throw std::invalid_argument("encode_png_rgb: " + std::to_string(rgb.size()) + " bytes is not " +
                                std::to_string(width) + "x" + std::to_string(height) + "x3");
  // Each scanline starts with filter type 0 (None).
  const size_t row = static_cast<size_t>(width) * 3;
  std::string raw;
  raw.reserve((row + 1) * height);
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(rgb.data() + y * row), row);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), level) != Z_OK)
    throw std::runtime_error("encode_png_rgb: zlib compress2 failed");
  packed.resize(packed_size);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(width));
  put_u32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", packed);
  put_chunk(out, "IEND", "");
  return out;
}

std::vector<uint8_t> random_image_rgb(int width, int height, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> base(0, 255), noise(-24, 24);
  const int c0[3] = {base(rng), base(rng), base(rng)}, c1[3] = {base(rng), base(rng), base(rng)};
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const double u = (static_cast<double>(x) / width + static_cast<double>(y) / height) / 2;
      for (int c = 0; c < 3; ++c) {
        const int v = static_cast<int>(c0[c] + (c1[c] - c0[c]) * u) + noise(rng);
        px[(static_cast<size_t>(y) * width + x) * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  return px;
}

}  // namespace vlm::bench
