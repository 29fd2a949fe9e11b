// Still WebP through libwebp's simple decoding API: features from the header first (size, the
// animation flag), then one decode straight into the RGB buffer.
#include <webp/decode.h>

#include "model/media/image_codecs.h"

namespace vlm::image_codecs {

RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) bad_image("WebP: truncated file");
  if (status != VP8_STATUS_OK) bad_image("WebP: corrupt header");
  if (features.has_animation) bad_image("animated WebP is not supported (still WebP is)");
  check_pixels(features.width, features.height, limits);
  RgbImage img;
  img.width = features.width;
  img.height = features.height;
  img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
  // MODE_RGB: libwebp writes the un-premultiplied color and drops alpha, the same bytes as the RGB
  // of PIL's (non-premultiplied) RGBA decode followed by convert("RGB").
  const uint8_t* out = WebPDecodeRGBInto(bytes.data(), bytes.size(), img.pixels.data(), img.pixels.size(),
                                         img.width * 3);
  if (out == nullptr) bad_image("WebP: corrupt or truncated image data");
  return img;
}

}  // namespace vlm::image_codecs
