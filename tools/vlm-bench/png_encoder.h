// A minimal PNG writer (8-bit RGB, no interlace) using zlib for the IDAT stream and the CRCs;
// enough for the generated images of the random-mm workload.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlm::bench {

// rgb: height rows of width*3 bytes. Returns the PNG file bytes. Throws std::invalid_argument when
// the sizes disagree and std::runtime_error if zlib fails. level: zlib level 0 (stored) .. 9.
std::string encode_png_rgb(const std::vector<uint8_t>& rgb, int width, int height, int level = 1);

// A seeded pseudo-random RGB image: smooth colour gradients plus noise, so it looks like a
// picture rather than static and still differs per seed (servers cannot cache it).
std::vector<uint8_t> random_image_rgb(int width, int height, uint64_t seed);

}  // namespace vlm::bench
