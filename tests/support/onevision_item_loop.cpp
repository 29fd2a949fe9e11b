#include "tests/support/onevision_item_loop.h"

#include <algorithm>
#include <vector>

#include "kernels/ops/vision_ops.h"

namespace vlm::testing {

void onevision_item_loop(const LlavaOnevisionModel& m, const MediaPixels& item, float* out) {
  const int g = m.grid();
  const int64_t C = m.config().llava.text.hidden_size, per_tile = static_cast<int64_t>(g) * g;
  const int64_t N = static_cast<int64_t>(item.data.size()) / (3LL * m.tile_size() * m.tile_size());
  const WeightStore& w = m.base().weights();
  const TensorView nl = w.get(w.has("model.image_newline") ? "model.image_newline" : "image_newline", {C});
  std::vector<float> newline_(static_cast<size_t>(C));
  convert_to_f32(nl.data, nl.dtype, newline_.data(), C);
  Tensor feats = Tensor::empty({N * per_tile, C});  // [N, g*g, C] projector output per tile
  m.base().encode_images(item.data.data(), N, feats.as<float>());
  const float* f = feats.as<float>();
  if (item.modality == Modality::Video) {
    const int64_t p = (g + 1) / 2;
    for (int64_t t = 0; t < N; ++t) bilinear_resize(f + t * per_tile * C, g, g, C, p, p, out + t * p * p * C);
    std::copy(newline_.begin(), newline_.end(), out + N * p * p * C);
    return;
  }
  const AnyresLayout a = m.image_layout({item.height, item.width});
  std::copy(f, f + per_tile * C, out);  // the base tile
  out += per_tile * C;
  // The tiles' features as one [rows*g, cols*g, C] map, cut to the unpadded window.
  const int64_t H = a.unpad_h, W = a.unpad_w;
  std::vector<float> map(static_cast<size_t>(H * W * C));
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const int64_t gy = y + a.unpad_top, gx = x + a.unpad_left;
      const int64_t t = 1 + (gy / g) * a.tile_cols + gx / g;
      const float* src = f + (t * per_tile + (gy % g) * g + gx % g) * C;
      std::copy(src, src + C, map.data() + (y * W + x) * C);
    }
  const float* rows = map.data();
  std::vector<float> shrunk;
  if (a.shrinks()) {
    shrunk.resize(static_cast<size_t>(a.out_h) * a.out_w * C);
    bilinear_resize(map.data(), H, W, C, a.out_h, a.out_w, shrunk.data());
    rows = shrunk.data();
  }
  for (int64_t y = 0; y < a.out_h; ++y) {
    std::copy(rows + y * a.out_w * C, rows + (y + 1) * a.out_w * C, out);
    out += a.out_w * C;
    std::copy(newline_.begin(), newline_.end(), out);
    out += C;
  }
}

}  // namespace vlm::testing
