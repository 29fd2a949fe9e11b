// The first frame of a GIF through giflib's record-level API (not DGifSlurp, which decodes every
// frame before the caller can check any frame's size): extensions up to the first image
// descriptor (only the graphics-control block's transparent index is kept), then that image's
// rows, de-interlaced, onto a canvas of palette indices, then the palette lookup. The rules for
// the canvas and transparency follow PIL's first frame + convert("RGB") (see image_decode.h).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <gif_lib.h>

#include "model/media/image_codecs.h"

namespace vlm::image_codecs {
namespace {

struct GifSource {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
};

// giflib treats a short read as a read failure ("truncated").
int gif_read_mem(GifFileType* gif, GifByteType* out, int n) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  if (n <= 0) return 0;
  const size_t take = std::min(static_cast<size_t>(n), src->bytes.size() - src->pos);
  std::memcpy(out, src->bytes.data() + src->pos, take);
  src->pos += take;
  return static_cast<int>(take);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int err = 0;
    DGifCloseFile(gif, &err);
  }
};
using GifHandle = std::unique_ptr<GifFileType, GifCloser>;

[[noreturn]] void gif_failed(int code) {
  const char* what = GifErrorString(code);
  bad_image(std::string("GIF: ") + (what ? what : "decoding failed"));
}

// File order of an interlaced image's rows: every 8th from 0, every 8th from 4, every 4th from 2,
// every 2nd from 1. Returns the image row of the `i`-th row in the file.
std::vector<int> interlaced_rows(int height) {
  std::vector<int> order;
  order.reserve(static_cast<size_t>(height));
  const int starts[4] = {0, 4, 2, 1};
  const int steps[4] = {8, 8, 4, 2};
  for (int pass = 0; pass < 4; ++pass)
    for (int y = starts[pass]; y < height; y += steps[pass]) order.push_back(y);
  return order;
}

}  // namespace

RgbImage decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  GifSource src{bytes, 0};
  int err = 0;
  GifHandle gif(DGifOpen(&src, gif_read_mem, &err));
  if (!gif) gif_failed(err);
  int transparent = -1;  // the last graphics-control block before the image wins, as in PIL
  for (;;) {
    GifRecordType type = UNDEFINED_RECORD_TYPE;
    if (DGifGetRecordType(gif.get(), &type) == GIF_ERROR) gif_failed(gif->Error);
    if (type == IMAGE_DESC_RECORD_TYPE) break;
    if (type == TERMINATE_RECORD_TYPE) bad_image("GIF: no image in the file");
    if (type != EXTENSION_RECORD_TYPE) bad_image("GIF: unexpected record");
    int code = 0;
    GifByteType* ext = nullptr;
    if (DGifGetExtension(gif.get(), &code, &ext) == GIF_ERROR) gif_failed(gif->Error);
    if (code == GRAPHICS_EXT_FUNC_CODE && ext != nullptr) {
      GraphicsControlBlock gcb;
      if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_ERROR) bad_image("GIF: bad graphics control block");
      if (gcb.TransparentColor != NO_TRANSPARENT_COLOR) transparent = gcb.TransparentColor;
    }
    while (ext != nullptr)
      if (DGifGetExtensionNext(gif.get(), &ext) == GIF_ERROR) gif_failed(gif->Error);
  }
  if (DGifGetImageDesc(gif.get()) == GIF_ERROR) gif_failed(gif->Error);
  const GifImageDesc& desc = gif->Image;
  if (desc.Left < 0 || desc.Top < 0 || desc.Width <= 0 || desc.Height <= 0) bad_image("GIF: empty first frame");
  // giflib's fields are ints read from 16-bit fields: the sums below cannot overflow.
  const int64_t canvas_w = std::max<int64_t>(gif->SWidth, int64_t{desc.Left} + desc.Width);
  const int64_t canvas_h = std::max<int64_t>(gif->SHeight, int64_t{desc.Top} + desc.Height);
  check_pixels(canvas_w, canvas_h, limits);

  const auto fill = static_cast<GifPixelType>(transparent >= 0 ? transparent : 0);
  std::vector<GifPixelType> indices(static_cast<size_t>(canvas_w * canvas_h), fill);
  const std::vector<int> rows =
      desc.Interlace ? interlaced_rows(desc.Height) : std::vector<int>{};
  for (int i = 0; i < desc.Height; ++i) {
    const int y = desc.Interlace ? rows[static_cast<size_t>(i)] : i;
    GifPixelType* line = indices.data() + (static_cast<size_t>(desc.Top + y) * canvas_w + desc.Left);
    if (DGifGetLine(gif.get(), line, desc.Width) == GIF_ERROR) gif_failed(gif->Error);
  }

  const ColorMapObject* map = desc.ColorMap != nullptr ? desc.ColorMap : gif->SColorMap;
  RgbImage img;
  img.width = static_cast<int>(canvas_w);
  img.height = static_cast<int>(canvas_h);
  img.pixels.resize(indices.size() * 3);
  for (size_t p = 0; p < indices.size(); ++p) {
    const int v = indices[p];
    uint8_t* out = img.pixels.data() + p * 3;
    if (map == nullptr) {
      out[0] = out[1] = out[2] = static_cast<uint8_t>(v);  // PIL: mode "L"
    } else if (map->Colors != nullptr && v < map->ColorCount) {
      out[0] = map->Colors[v].Red;
      out[1] = map->Colors[v].Green;
      out[2] = map->Colors[v].Blue;
    } else {
      out[0] = out[1] = out[2] = 0;
    }
  }
  return img;
}

}  // namespace vlm::image_codecs
