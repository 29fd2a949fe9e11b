// Fuzzes model/image_decode (JPEG, PNG, WebP, GIF, BMP through their libraries and our own
// code) with a pixel limit small enough that huge headers are refused before decoding.
#include <cstdint>
#include <span>

#include "fuzz/fuzz_util.h"
#include "model/media/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  vlm::ImageLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_pixels = 1 << 20;
  vlm::fuzz::run_expecting_clean_errors([&] {
    vlm::RgbImage img = vlm::decode_image(std::span<const uint8_t>(data, size), limits);
    // The contract: a decoded image has its size and is within the limit.
    if (img.width <= 0 || img.height <= 0 ||
        static_cast<int64_t>(img.width) * img.height > limits.max_pixels ||
        img.pixels.size() != static_cast<size_t>(img.width) * img.height * 3)
      std::abort();
  });
  return 0;
}
