// Format dispatch, plus JPEG through libjpeg's classic API and PNG through libpng's classic API,
// both with setjmp error recovery so a bad image fails only its request. WebP, GIF and BMP live in
// their own files (webp_decode.cpp, gif_decode.cpp, bmp_decode.cpp).
#include "model/media/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include "kernels/core/check.h"
#include "model/media/image_codecs.h"

namespace vlm {
namespace image_codecs {

void bad_image(const std::string& what) {
  throw RequestError(400, "invalid_request_error", "invalid image: " + what, "image");
}

void check_pixels(int64_t w, int64_t h, const ImageLimits& limits) {
  if (w <= 0 || h <= 0) bad_image("zero-sized image");
  if (w * h > limits.max_pixels)
    bad_image(fmt::format("{}x{} is over the limit of {} pixels", w, h, limits.max_pixels));
}

namespace {

// ---- JPEG
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_quiet(j_common_ptr, int) {}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_quiet;
  RgbImage img;
  std::string failure;
  // No C++ objects with destructors may be created between setjmp and the decode's end except
  // `img`, which outlives the jump.
  if (setjmp(err.jump)) {
    failure = err.message;
    jpeg_destroy_decompress(&cinfo);
    bad_image("JPEG: " + failure);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const J_COLOR_SPACE cs = cinfo.jpeg_color_space;
  if (cs != JCS_GRAYSCALE && cs != JCS_YCbCr && cs != JCS_RGB) {
    jpeg_destroy_decompress(&cinfo);
    bad_image("JPEG color space (CMYK/YCCK) is not supported");
  }
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > limits.max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    check_pixels(cinfo.image_width, cinfo.image_height, limits);
  }
  // PIL's defaults: islow DCT, fancy upsampling, no block smoothing changes (libjpeg defaults).
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  img.width = static_cast<int>(cinfo.output_width);
  img.height = static_cast<int>(cinfo.output_height);
  img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = img.at(static_cast<int>(cinfo.output_scanline), 0);
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}

namespace {

// ---- PNG
struct PngSource {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
};

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (src->pos + n > src->bytes.size()) png_error(png, "truncated file");
  std::memcpy(out, src->bytes.data() + src->pos, n);
  src->pos += n;
}

void png_error_fn(png_structp png, png_const_charp msg) {
  auto* failure = static_cast<std::string*>(png_get_error_ptr(png));
  *failure = msg;
  png_longjmp(png, 1);
}

void png_warning_fn(png_structp, png_const_charp) {}

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  std::string failure;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &failure, png_error_fn, png_warning_fn);
  VLM_CHECK(png != nullptr, "png_create_read_struct failed");
  png_infop info = png_create_info_struct(png);
  RgbImage img;
  std::vector<png_bytep> rows;
  // Written after setjmp and read after the jump: volatile.
  volatile int64_t limit_w = 0, limit_h = 0;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    if (limit_w != 0) check_pixels(limit_w, limit_h, limits);
    bad_image("PNG: " + failure);
  }
  PngSource src{bytes, 0};
  png_set_read_fn(png, &src, png_read_mem);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  img.width = static_cast<int>(png_get_image_width(png, info));
  img.height = static_cast<int>(png_get_image_height(png, info));
  if (static_cast<int64_t>(img.width) * img.height > limits.max_pixels || img.width <= 0 || img.height <= 0) {
    limit_w = img.width;
    limit_h = img.height;
    png_error(png, "over the pixel limit");
  }
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  // PIL's convert("RGB"): palette entries expanded (tRNS ignored), gray replicated, alpha
  // dropped; its 16-bit unpackers keep the most significant byte (png_set_strip_16 does too).
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8)
    png_error(png, "unexpected pixel layout after conversion");
  img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
  rows.resize(static_cast<size_t>(img.height));
  for (int y = 0; y < img.height; ++y) rows[y] = img.at(y, 0);
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return img;
}

}  // namespace image_codecs

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  auto starts = [&](std::initializer_list<uint8_t> m, size_t at = 0) {
    if (b.size() < at + m.size()) return false;
    return std::equal(m.begin(), m.end(), b.begin() + static_cast<ptrdiff_t>(at));
  };
  if (starts({0xFF, 0xD8, 0xFF})) return ImageFormat::Jpeg;
  if (starts({0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A})) return ImageFormat::Png;
  if (starts({'R', 'I', 'F', 'F'}) && starts({'W', 'E', 'B', 'P'}, 8)) return ImageFormat::Webp;
  if (starts({'G', 'I', 'F', '8'})) return ImageFormat::Gif;
  if (starts({'B', 'M'})) return ImageFormat::Bmp;
  return ImageFormat::Unknown;
}

RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  using namespace image_codecs;
  if (bytes.empty()) bad_image("empty data");
  if (static_cast<int64_t>(bytes.size()) > limits.max_bytes)
    bad_image(fmt::format("{} bytes is over the limit of {} bytes", bytes.size(), limits.max_bytes));
  switch (sniff_image_format(bytes)) {
    case ImageFormat::Jpeg: return decode_jpeg(bytes, limits);
    case ImageFormat::Png: return decode_png(bytes, limits);
    case ImageFormat::Webp: return decode_webp(bytes, limits);
    case ImageFormat::Gif: return decode_gif(bytes, limits);
    case ImageFormat::Bmp: return decode_bmp(bytes, limits);
    default: bad_image("unrecognized format (JPEG, PNG, WebP, GIF and BMP are supported)");
  }
}

}  // namespace vlm
