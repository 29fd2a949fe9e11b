// WebP, GIF and BMP decoding on images built in the test with known pixels (libwebp's lossless
// encoder, giflib's EGifSpew, hand-built BMP bytes), plus truncated, corrupt and oversized
// inputs of each format: each must be a RequestError 400, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <gif_lib.h>
#include <webp/encode.h>

#include "kernels/core/check.h"
#include "model/media/image_decode.h"

namespace vlm {
namespace {

using Bytes = std::vector<uint8_t>;

// A w x h RGB test pattern whose every pixel differs.
Bytes pattern(int w, int h) {
  Bytes rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 37 + 11);
  return rgb;
}

void expect_pixels(const RgbImage& img, int w, int h, const Bytes& rgb) {
  ASSERT_EQ(img.width, w);
  ASSERT_EQ(img.height, h);
  ASSERT_EQ(img.pixels.size(), rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i)
    ASSERT_EQ(img.pixels[i], rgb[i]) << "pixel " << i / 3 << " channel " << i % 3;
}

void expect_bad(const Bytes& bytes, const std::string& needle, ImageLimits limits = {}) {
  try {
    decode_image(bytes, limits);
    ADD_FAILURE() << "no error; expected '" << needle << "'";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Every strict prefix and every single-byte corruption either decodes (to `good`'s size: a
// prefix may lose only trailing bytes the decoder does not need) or throws RequestError 400.
void expect_robust(const Bytes& good) {
  auto try_decode = [](const Bytes& bytes) {
    try {
      decode_image(bytes);
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 400);
    }
  };
  for (size_t n = 1; n < good.size(); ++n) try_decode(Bytes(good.begin(), good.begin() + n));
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t flip : {0x01, 0x80, 0xFF}) {
      Bytes bad = good;
      bad[i] ^= flip;
      try_decode(bad);
    }
}

// ---- WebP
Bytes webp_lossless(const Bytes& pixels, int w, int h, int channels) {
  uint8_t* out = nullptr;
  const size_t n = channels == 3 ? WebPEncodeLosslessRGB(pixels.data(), w, h, w * 3, &out)
                                 : WebPEncodeLosslessRGBA(pixels.data(), w, h, w * 4, &out);
  EXPECT_GT(n, 0u);
  Bytes bytes(out, out + n);
  WebPFree(out);
  return bytes;
}

TEST(ImageFormats, WebpLosslessRgbExact) {
  const Bytes rgb = pattern(5, 3);
  const Bytes webp = webp_lossless(rgb, 5, 3, 3);
  EXPECT_EQ(sniff_image_format(webp), ImageFormat::Webp);
  expect_pixels(decode_image(webp), 5, 3, rgb);
}

TEST(ImageFormats, WebpAlphaIsDroppedNotComposited) {
  // Non-zero alphas: the lossless encoder keeps the color under them (it may rewrite it only
  // under alpha 0). convert("RGB") keeps that color, like the PNG path's png_set_strip_alpha.
  const Bytes rgb = pattern(4, 2);
  Bytes rgba;
  for (size_t p = 0; p < 8; ++p) {
    rgba.insert(rgba.end(), rgb.begin() + p * 3, rgb.begin() + p * 3 + 3);
    rgba.push_back(static_cast<uint8_t>(1 + p * 30));
  }
  expect_pixels(decode_image(webp_lossless(rgba, 4, 2, 4)), 4, 2, rgb);
}

TEST(ImageFormats, WebpBadInputs) {
  const Bytes webp = webp_lossless(pattern(6, 4), 6, 4, 3);
  expect_bad(Bytes(webp.begin(), webp.begin() + 20), "WebP");
  expect_bad(Bytes(webp.begin(), webp.end() - 5), "WebP");
  Bytes corrupt = webp;
  for (size_t i = 25; i < corrupt.size(); ++i) corrupt[i] ^= 0x5a;
  expect_bad(corrupt, "WebP");
  expect_bad(webp, "pixels", ImageLimits{.max_bytes = 1 << 20, .max_pixels = 23});
  expect_bad(webp, "bytes", ImageLimits{.max_bytes = 10, .max_pixels = 100});
  expect_robust(webp);
}

// ---- GIF
struct GifFrame {
  int left = 0, top = 0, width = 0, height = 0;
  bool interlace = false;
  Bytes indices;  // in image order (EGifSpew interlaces)
  int transparent = -1;
};

int gif_write_mem(GifFileType* gif, const GifByteType* data, int n) {
  auto* out = static_cast<Bytes*>(gif->UserData);
  out->insert(out->end(), data, data + n);
  return n;
}

Bytes gif_encode(int screen_w, int screen_h, const std::vector<GifColorType>& colors,
                 const std::vector<GifFrame>& frames) {
  Bytes out;
  int err = 0;
  GifFileType* gif = EGifOpen(&out, gif_write_mem, &err);
  EXPECT_NE(gif, nullptr);
  gif->SWidth = screen_w;
  gif->SHeight = screen_h;
  gif->SColorResolution = 8;
  gif->SBackGroundColor = 0;
  gif->SColorMap = colors.empty() ? nullptr : GifMakeMapObject(static_cast<int>(colors.size()), colors.data());
  for (const GifFrame& f : frames) {
    SavedImage* img = GifMakeSavedImage(gif, nullptr);
    img->ImageDesc = GifImageDesc{f.left, f.top, f.width, f.height, f.interlace, nullptr};
    img->RasterBits = static_cast<GifByteType*>(std::malloc(f.indices.size()));  // freed by giflib
    std::memcpy(img->RasterBits, f.indices.data(), f.indices.size());
    GraphicsControlBlock gcb{DISPOSAL_UNSPECIFIED, false, 10, f.transparent};
    EGifGCBToSavedExtension(&gcb, gif, gif->ImageCount - 1);
  }
  // giflib 5.2.1's EGifSpew writes and closes the handle but frees neither the saved images nor
  // the global color map: free them from a copy of the handle's fields afterwards.
  GifFileType owned{};
  owned.SavedImages = gif->SavedImages;
  owned.ImageCount = gif->ImageCount;
  ColorMapObject* map = gif->SColorMap;
  EXPECT_EQ(EGifSpew(gif), GIF_OK);
  GifFreeSavedImages(&owned);
  GifFreeMapObject(map);
  return out;
}

const std::vector<GifColorType> kColors = {{10, 20, 30}, {200, 0, 7}, {1, 255, 128}, {90, 91, 92}};

Bytes expand(const Bytes& indices, const std::vector<GifColorType>& colors) {
  Bytes rgb;
  for (uint8_t i : indices) rgb.insert(rgb.end(), {colors[i].Red, colors[i].Green, colors[i].Blue});
  return rgb;
}

TEST(ImageFormats, GifFirstFrameExact) {
  const Bytes first = {0, 1, 2, 3, 3, 2, 1, 0, 1, 1, 2, 2};
  const Bytes second(12, 3);
  const Bytes gif = gif_encode(4, 3, kColors, {{0, 0, 4, 3, false, first, -1}, {0, 0, 4, 3, false, second, -1}});
  EXPECT_EQ(sniff_image_format(gif), ImageFormat::Gif);
  expect_pixels(decode_image(gif), 4, 3, expand(first, kColors));
}

TEST(ImageFormats, GifTransparentIndexKeepsItsPaletteColor) {
  // A 2x2 frame at (1, 1) of a 4x3 screen with transparent index 2: PIL fills the canvas with the
  // transparent index and convert("RGB") shows every index, transparent or not, as its color.
  const Bytes frame = {2, 1, 0, 2};
  const Bytes gif = gif_encode(4, 3, kColors, {{1, 1, 2, 2, false, frame, 2}});
  const Bytes canvas = {2, 2, 2, 2,  //
                        2, 2, 1, 2,  //
                        2, 0, 2, 2};
  expect_pixels(decode_image(gif), 4, 3, expand(canvas, kColors));
  // Without transparency the canvas outside the frame is index 0.
  const Bytes opaque = gif_encode(4, 3, kColors, {{1, 1, 2, 2, false, frame, -1}});
  expect_pixels(decode_image(opaque), 4, 3, expand({0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 2, 0}, kColors));
}

TEST(ImageFormats, GifInterlacedAndOversizedFrame) {
  // 1x10 interlaced. EGifSpew takes rows in image order and writes them in file order: rows 0,
  // 8, 4, 2, 6, 1, 3, 5, 7, 9. Clearing the interlace flag shows that order; with it set, the
  // decoder must restore image order.
  const Bytes rows = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
  const Bytes gif = gif_encode(1, 10, kColors, {{0, 0, 1, 10, true, rows, -1}});
  expect_pixels(decode_image(gif), 1, 10, expand(rows, kColors));
  Bytes flat = gif;
  const auto sep = std::find(flat.begin() + 25, flat.end(), uint8_t{','});  // after screen + map
  ASSERT_LT(sep + 9, flat.end());
  ASSERT_TRUE(sep[9] & 0x40);
  sep[9] &= ~0x40;
  Bytes file_order;
  for (int y : {0, 8, 4, 2, 6, 1, 3, 5, 7, 9}) file_order.push_back(rows[static_cast<size_t>(y)]);
  expect_pixels(decode_image(flat), 1, 10, expand(file_order, kColors));
  // A frame sticking out of a 1x1 screen grows the canvas (PIL does the same).
  expect_pixels(decode_image(gif_encode(1, 1, kColors, {{1, 0, 1, 2, false, {3, 1}, -1}})), 2, 2,
                expand({0, 3, 0, 1}, kColors));
}

TEST(ImageFormats, GifBadInputs) {
  const Bytes frame = {0, 1, 2, 3, 3, 2, 1, 0, 1, 1, 2, 2};
  const Bytes gif = gif_encode(4, 3, kColors, {{0, 0, 4, 3, false, frame, 1}});
  expect_bad(Bytes(gif.begin(), gif.begin() + 10), "GIF");
  expect_bad(Bytes(gif.begin(), gif.begin() + gif.size() / 2), "GIF");
  Bytes no_image(gif.begin(), gif.begin() + 13 + 12);  // header, screen and color map
  no_image.push_back(';');
  expect_bad(no_image, "no image");
  expect_bad(gif, "pixels", ImageLimits{.max_bytes = 1 << 20, .max_pixels = 11});
  // A 65535x65535 screen is refused from the header, before any allocation.
  Bytes huge = gif;
  huge[6] = huge[7] = huge[8] = huge[9] = 0xFF;
  expect_bad(huge, "pixels");
  expect_robust(gif);
}

// ---- BMP
void put16(Bytes& b, size_t at, uint32_t v) { b[at] = v & 0xFF, b[at + 1] = (v >> 8) & 0xFF; }
void put32(Bytes& b, size_t at, uint32_t v) { put16(b, at, v & 0xFFFF), put16(b, at + 2, v >> 16); }

// A BITMAPINFOHEADER (40 bytes) BMP; `extra` (masks or palette) follows the header, then `rows`
// (already padded, in file order).
Bytes bmp(int32_t w, int32_t h, int bits, uint32_t compression, const Bytes& extra, const Bytes& rows,
          uint32_t colors_used = 0) {
  Bytes b(54, 0);
  b[0] = 'B', b[1] = 'M';
  const uint32_t offset = 54 + static_cast<uint32_t>(extra.size());
  put32(b, 2, offset + static_cast<uint32_t>(rows.size()));
  put32(b, 10, offset);
  put32(b, 14, 40);
  put32(b, 18, static_cast<uint32_t>(w));
  put32(b, 22, static_cast<uint32_t>(h));
  put16(b, 26, 1);
  put16(b, 28, static_cast<uint32_t>(bits));
  put32(b, 30, compression);
  put32(b, 46, colors_used);
  if (!extra.empty()) b.insert(b.end(), extra.begin(), extra.end());  // (GCC 12 -Warray-bounds)
  b.insert(b.end(), rows.begin(), rows.end());
  return b;
}

TEST(ImageFormats, Bmp24BottomUpWithPadding) {
  const Bytes rgb = pattern(3, 2);  // 9 bytes a row, padded to 12
  Bytes rows;
  for (int y : {1, 0}) {  // bottom-up: the last image row first
    for (int x = 0; x < 3; ++x) {
      const uint8_t* p = rgb.data() + (y * 3 + x) * 3;
      rows.insert(rows.end(), {p[2], p[1], p[0]});
    }
    rows.insert(rows.end(), {0xEE, 0xEE, 0xEE});
  }
  const Bytes b = bmp(3, 2, 24, 0, {}, rows);
  EXPECT_EQ(sniff_image_format(b), ImageFormat::Bmp);
  expect_pixels(decode_image(b), 3, 2, rgb);
}

TEST(ImageFormats, Bmp32TopDownRgbAndBitfields) {
  const Bytes rgb = pattern(2, 3);
  Bytes bgrx, rgba;
  for (size_t p = 0; p < 6; ++p) {
    const uint8_t* c = rgb.data() + p * 3;
    bgrx.insert(bgrx.end(), {c[2], c[1], c[0], 0x33});
    rgba.insert(rgba.end(), {c[0], c[1], c[2], 0x44});
  }
  expect_pixels(decode_image(bmp(2, -3, 32, 0, {}, bgrx)), 2, 3, rgb);
  Bytes masks(12);
  put32(masks, 0, 0x000000FF), put32(masks, 4, 0x0000FF00), put32(masks, 8, 0x00FF0000);
  expect_pixels(decode_image(bmp(2, -3, 32, 3, masks, rgba)), 2, 3, rgb);
  put32(masks, 0, 0x00000FF0);
  expect_bad(bmp(2, -3, 32, 3, masks, rgba), "bit-field masks");
}

TEST(ImageFormats, Bmp8Paletted) {
  // Three palette entries (BGRX); index 7 is past the palette and reads as black.
  const Bytes palette = {30, 20, 10, 0, 7, 0, 200, 0, 128, 255, 1, 0};
  const Bytes rows = {0, 1, 2, 0xAA,  // image row 1 (bottom-up), padded to 4
                      2, 7, 0, 0xAA};
  const Bytes expect = {1, 255, 128, 0, 0, 0, 10, 20, 30,  //
                        10, 20, 30, 200, 0, 7, 1, 255, 128};
  expect_pixels(decode_image(bmp(3, 2, 8, 0, palette, rows, 3)), 3, 2, expect);
}

TEST(ImageFormats, BmpBadInputs) {
  const Bytes rows(24, 9);
  const Bytes b = bmp(3, 2, 24, 0, {}, rows);
  expect_bad(Bytes(b.begin(), b.begin() + 20), "BMP");
  expect_bad(Bytes(b.begin(), b.end() - 1), "truncated pixel data");
  expect_bad(b, "pixels", ImageLimits{.max_bytes = 1 << 20, .max_pixels = 5});
  expect_bad(bmp(50000, 50000, 24, 0, {}, rows), "pixels");                      // from the header
  expect_bad(bmp(40000, 40000, 32, 0, {}, rows), "truncated pixel data",  // under a huge limit
             ImageLimits{.max_bytes = 1 << 20, .max_pixels = INT64_MAX});
  expect_bad(bmp(3, static_cast<int32_t>(0x80000000u), 24, 0, {}, rows), "height");
  expect_bad(bmp(0, 2, 24, 0, {}, rows), "zero-sized");
  expect_bad(bmp(3, 2, 16, 0, {}, rows), "16-bit");
  expect_bad(bmp(3, 2, 8, 1, {}, rows), "RLE");
  expect_bad(bmp(3, 2, 8, 0, Bytes(12), rows, 300), "palette");
  expect_bad(bmp(3, 2, 8, 0, Bytes(12), {}, 3), "truncated pixel data");
  Bytes bad_header = b;
  put32(bad_header, 14, 41);
  expect_bad(bad_header, "header size");
  Bytes bad_offset = b;
  put32(bad_offset, 10, 0xFFFFFFF0u);
  expect_bad(bad_offset, "truncated pixel data");
  expect_robust(b);
  expect_robust(bmp(3, 2, 8, 0, {30, 20, 10, 0, 7, 0, 200, 0}, Bytes(8, 1), 2));
}

}  // namespace
}  // namespace vlm
