// Image bytes -> 8-bit RGB, the way Hugging Face processors see a PIL image after
// `image.convert("RGB")` (transformers 5.17 convert_to_rgb): grayscale is replicated, palettes are
// expanded, alpha is dropped (not composited), 16-bit PNG samples keep their high byte. EXIF
// orientation is NOT applied: PIL's Image.open does not apply it and neither do HF's processors.
// Formats:
// - JPEG (libjpeg-turbo; CMYK/YCCK rejected), PNG (libpng; tRNS ignored like PIL's convert).
// - WebP (libwebp): still images only (animated WebP is rejected); alpha dropped, not composited,
//   as for PNG: the RGB is libwebp's un-premultiplied color, which is what PIL's RGBA holds.
// - GIF (giflib): the first frame only, on a canvas of the logical screen (grown to hold the frame
//   if it sticks out, as PIL does). Like PIL's mode-P first frame + convert("RGB"): every pixel is
//   its palette color, the transparent index included (transparency is dropped, not composited);
//   canvas outside the frame gets the transparent index if the frame has one, else index 0;
//   indices past the color map are black; no color map at all means gray (v, v, v).
// - BMP (by hand, bmp_decode.cpp): 24/32-bit BI_RGB, 24/32-bit BI_BITFIELDS whose R/G/B masks are
//   whole bytes, 8-bit paletted (indices past the palette are black); bottom-up or top-down;
//   alpha dropped. RLE, 1/4/16-bit and other masks are rejected.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace vlm {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // [H, W, 3] row-major

  const uint8_t* at(int y, int x) const { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
  uint8_t* at(int y, int x) { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
};

struct ImageLimits {
  int64_t max_bytes = 32ll << 20;       // encoded size
  int64_t max_pixels = 64ll << 20;      // width * height, checked from the header before decoding
};

enum class ImageFormat { Unknown, Jpeg, Png, Webp, Gif, Bmp };
// Sniffs the magic bytes.
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

// Decodes `bytes`. Throws RequestError (400, invalid_request_error, param "image") for an empty
// or oversized input, an unsupported format or color space, a corrupt or truncated file, or an
// image over the pixel limit; the message says which.
RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {});

}  // namespace vlm
