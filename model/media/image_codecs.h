// Internal to image decoding: one decoder per format, called by decode_image() after it has
// checked the byte limit and sniffed the format. Each returns an 8-bit RGB image equal to PIL's
// `Image.open(...).convert("RGB")` (see image_decode.h) or throws RequestError 400 through
// bad_image(); none allocates pixel memory before checking the header's size with check_pixels().
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/media/image_decode.h"

namespace vlm::image_codecs {

// Throws RequestError(400, "invalid_request_error", "invalid image: " + what, "image").
[[noreturn]] void bad_image(const std::string& what);
// Throws through bad_image() unless 0 < w, 0 < h and w * h <= limits.max_pixels. Callers pass
// values read from a header (at most 32 bits each, so the product cannot overflow int64).
void check_pixels(int64_t w, int64_t h, const ImageLimits& limits);

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits);
RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits);
// Still WebP (lossy or lossless, with or without alpha); animated WebP is rejected.
RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits);
// The first frame of a GIF87a/GIF89a file.
RgbImage decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits);
// Windows BMP: 24/32-bit BI_RGB, 24/32-bit BI_BITFIELDS with byte-aligned 8-bit masks, 8-bit
// paletted BI_RGB; bottom-up or top-down. Written by hand (bmp_decode.cpp).
RgbImage decode_bmp(std::span<const uint8_t> bytes, const ImageLimits& limits);

}  // namespace vlm::image_codecs
