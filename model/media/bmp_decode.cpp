// Windows BMP by hand (Debian has no BMP library): this parses hostile bytes, so every field is
// read through bounds-checked helpers, sizes are checked against the pixel limit before any
// allocation, and the pixel array's extent is checked by division (no overflowing products).
#include <cstring>
#include <vector>

#include "model/media/image_codecs.h"

namespace vlm::image_codecs {
namespace {

constexpr uint32_t kBiRgb = 0;
constexpr uint32_t kBiBitfields = 3;
constexpr uint32_t kBiAlphaBitfields = 6;
constexpr size_t kFileHeader = 14;  // "BM", file size, reserved, offset of the pixel array

// Little-endian reads at an absolute offset; a read past the end is a truncated file.
struct BmpReader {
  std::span<const uint8_t> b;
  bool has(uint64_t off, uint64_t n) const { return off <= b.size() && n <= b.size() - off; }
  uint32_t u32(uint64_t off) const {
    if (!has(off, 4)) bad_image("BMP: truncated header");
    return uint32_t{b[off]} | uint32_t{b[off + 1]} << 8 | uint32_t{b[off + 2]} << 16 | uint32_t{b[off + 3]} << 24;
  }
  uint16_t u16(uint64_t off) const {
    if (!has(off, 2)) bad_image("BMP: truncated header");
    return static_cast<uint16_t>(b[off] | b[off + 1] << 8);
  }
  int32_t i32(uint64_t off) const { return static_cast<int32_t>(u32(off)); }
};

// Shift of an 8-bit field mask (0xFF << 8k inside `bits` bits); -1 for any other mask.
int byte_mask_shift(uint32_t mask, int bits) {
  for (int shift = 0; shift + 8 <= bits; shift += 8)
    if (mask == (0xFFu << shift)) return shift;
  return -1;
}

}  // namespace

RgbImage decode_bmp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  const BmpReader r{bytes};
  const uint32_t pixel_offset = r.u32(10);
  const uint32_t header_size = r.u32(kFileHeader);
  int64_t width = 0, height = 0;
  int bits = 0;
  uint32_t compression = kBiRgb, colors_used = 0;
  size_t palette_entry = 4;
  if (header_size == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes, always bottom-up, BGR palette
    width = r.u16(18);
    height = r.u16(20);
    bits = r.u16(24);
    palette_entry = 3;
  } else if (header_size == 40 || header_size == 52 || header_size == 56 || header_size == 64 ||
             header_size == 108 || header_size == 124) {  // BITMAPINFOHEADER and its successors
    width = r.i32(18);
    height = r.i32(22);
    bits = r.u16(28);
    compression = r.u32(30);
    colors_used = r.u32(46);
  } else {
    bad_image("BMP: unsupported header size " + std::to_string(header_size));
  }
  if (!r.has(kFileHeader, header_size)) bad_image("BMP: truncated header");
  const bool top_down = height < 0;
  if (top_down) height = -height;  // from an int32: cannot overflow int64
  if (height > INT32_MAX) bad_image("BMP: bad height");
  check_pixels(width, height, limits);

  // Channel shifts inside the little-endian pixel word (24/32-bit) and the palette (8-bit).
  int shift_r = 16, shift_g = 8, shift_b = 0;
  std::vector<uint8_t> palette;  // [256, 3] RGB; entries past the file's palette stay black
  if (bits == 24 || bits == 32) {
    if (compression == kBiBitfields || compression == kBiAlphaBitfields) {
      // Masks sit right after the 40-byte header fields: inside a V2+ header, or after a V1 one.
      shift_r = byte_mask_shift(r.u32(54), bits);
      shift_g = byte_mask_shift(r.u32(58), bits);
      shift_b = byte_mask_shift(r.u32(62), bits);
      if (shift_r < 0 || shift_g < 0 || shift_b < 0) bad_image("BMP: unsupported bit-field masks");
    } else if (compression != kBiRgb) {
      bad_image("BMP: unsupported compression " + std::to_string(compression));
    }
  } else if (bits == 8) {
    if (compression != kBiRgb) bad_image("BMP: compressed (RLE) bitmaps are not supported");
    const uint64_t count = colors_used == 0 ? 256 : colors_used;
    if (count > 256) bad_image("BMP: palette of " + std::to_string(count) + " colors is over 256");
    const uint64_t palette_at = kFileHeader + uint64_t{header_size};
    if (!r.has(palette_at, count * palette_entry)) bad_image("BMP: truncated palette");
    palette.assign(256 * 3, 0);
    for (uint64_t i = 0; i < count; ++i) {
      const uint8_t* e = bytes.data() + palette_at + i * palette_entry;  // B, G, R(, reserved)
      palette[i * 3 + 0] = e[2];
      palette[i * 3 + 1] = e[1];
      palette[i * 3 + 2] = e[0];
    }
  } else {
    bad_image("BMP: " + std::to_string(bits) + "-bit pixels are not supported (8, 24 and 32 are)");
  }

  // Rows are padded to 4 bytes. width < 2^31 and bits <= 32, so the stride fits in uint64.
  const uint64_t stride = (static_cast<uint64_t>(width) * static_cast<uint64_t>(bits) + 31) / 32 * 4;
  if (pixel_offset > bytes.size() || stride > (bytes.size() - pixel_offset) / static_cast<uint64_t>(height))
    bad_image("BMP: truncated pixel data");

  RgbImage img;
  img.width = static_cast<int>(width);
  img.height = static_cast<int>(height);
  img.pixels.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  const size_t bytes_per_pixel = static_cast<size_t>(bits) / 8;
  for (int y = 0; y < img.height; ++y) {
    const int file_row = top_down ? y : img.height - 1 - y;
    const uint8_t* row = bytes.data() + pixel_offset + static_cast<uint64_t>(file_row) * stride;
    uint8_t* out = img.at(y, 0);
    for (int x = 0; x < img.width; ++x, out += 3) {
      const uint8_t* p = row + static_cast<size_t>(x) * bytes_per_pixel;
      if (bits == 8) {
        std::memcpy(out, palette.data() + size_t{p[0]} * 3, 3);
        continue;
      }
      uint32_t word = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16;
      if (bits == 32) word |= uint32_t{p[3]} << 24;
      out[0] = static_cast<uint8_t>(word >> shift_r);
      out[1] = static_cast<uint8_t>(word >> shift_g);
      out[2] = static_cast<uint8_t>(word >> shift_b);
    }
  }
  return img;
}

}  // namespace vlm::image_codecs
