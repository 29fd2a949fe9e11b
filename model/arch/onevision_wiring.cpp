// Restated from transformers 5.17 modeling_llava_onevision.py (pack_image_features, unpad_image,
// apply_pooling); no code taken.
#include "model/arch/onevision_wiring.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/core/check.h"

namespace vlm {

namespace {

std::vector<int64_t> iota_rows(int64_t begin, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

}  // namespace

OnevisionWiring::OnevisionWiring(const LlavaVision& vision, LayerBackend& backend, const WeightSource& w,
                                 const WeightRef& newline)
    : vision_(vision),
      first_(static_cast<int>(vision.plan(1).bufs.size())),
      rows_(backend.row_ops()),
      newline_(backend.learned_rows(w, newline)) {
  VLM_CHECK(vision.spec().tokens_per_image() == grid() * grid(), "OneVision tiles of {} rows, a grid of {}",
            vision.spec().tokens_per_image(), grid());
}

OnevisionWiring::~OnevisionWiring() = default;

ActivationPlan OnevisionWiring::plan(int64_t N, const AnyresLayout* a) const {
  ActivationPlan p = vision_.plan(N);
  const int64_t C = vision_.spec().out_features, g = grid(), pooled = ((g + 1) / 2) * ((g + 1) / 2);
  p.bufs.push_back({C, ActRole::Hidden, false, N * g * g});  // the tiles' rows
  // image: the unpadded map and its shrink; video: the pooled frames (and one unused row).
  const int64_t map = a != nullptr ? int64_t{a->unpad_h} * a->unpad_w : N * pooled;
  const int64_t shrunk = a != nullptr ? int64_t{a->out_h} * a->out_w : 1;
  p.bufs.push_back({C, ActRole::Hidden, false, std::max<int64_t>(map, 1)});
  p.bufs.push_back({C, ActRole::Hidden, false, std::max<int64_t>(shrunk, 1)});
  return p;
}

// The map is at most the AnyRes tiles' rows ((N - 1) g^2), the shrink at most the map, the pooled
// frames at most the frames' rows.
ActivationPlan OnevisionWiring::largest_plan(int64_t N) const {
  ActivationPlan p = plan(N, nullptr);
  const int64_t g = grid();
  p.bufs[static_cast<size_t>(first_) + 1].rows = std::max<int64_t>(N * g * g, 1);
  p.bufs[static_cast<size_t>(first_) + 2].rows = std::max<int64_t>(N * g * g, 1);
  return p;
}

void OnevisionWiring::image(Step& s, Act tiles, const AnyresLayout& a, Act out) const {
  const int64_t g = grid(), per_tile = g * g;
  VLM_CHECK(tiles.rows == a.num_tiles() && out.rows == a.num_tokens(), "{} tiles for a layout of {}, {} rows for {}",
            tiles.rows, a.num_tiles(), out.rows, a.num_tokens());
  // Every index list first (see the header).
  const std::vector<int64_t> base = iota_rows(0, per_tile);
  // The tiles' rows as one map, cut to the unpadded window.
  const int64_t H = a.unpad_h, W = a.unpad_w;
  std::vector<int64_t> src(static_cast<size_t>(H * W));
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const int64_t gy = y + a.unpad_top, gx = x + a.unpad_left;
      const int64_t t = 1 + (gy / g) * a.tile_cols + gx / g;
      src[static_cast<size_t>(y * W + x)] = t * per_tile + (gy % g) * g + gx % g;
    }
  // Map row y -> out rows after the base tile, each followed by the newline.
  std::vector<int64_t> from, to, newlines;
  for (int64_t y = 0; y < a.out_h; ++y) {
    const int64_t row0 = per_tile + y * (a.out_w + 1);
    for (int64_t x = 0; x < a.out_w; ++x) {
      from.push_back(y * a.out_w + x);
      to.push_back(row0 + x);
    }
    newlines.push_back(row0 + a.out_w);
  }

  const Act feats = s.act(first_);  // [N * g*g, C]
  vision_.forward(s, tiles, feats);
  rows_->gather_rows(s, feats, base, row_slice(out, 0, per_tile), 0);  // the base tile
  Act map = row_slice(s.act(first_ + 1), 0, H * W);
  rows_->gather_rows(s, feats, src, map, 0);
  if (a.shrinks()) {
    const Act shrunk = row_slice(s.act(first_ + 2), 0, int64_t{a.out_h} * a.out_w);
    rows_->bilinear(s, map, H, W, a.out_h, a.out_w, shrunk);
    map = shrunk;
  }
  rows_->copy_rows(s, map, from, out, to);
  newline_->write(s, 0, newlines, out);
}

void OnevisionWiring::video(Step& s, Act frames, Act out) const {
  const int64_t g = grid(), per_tile = g * g, p = (g + 1) / 2, F = frames.rows;
  VLM_CHECK(out.rows == F * p * p + 1, "{} rows for {} frames of {}", out.rows, F, p * p);
  const std::vector<int64_t> pooled_rows = iota_rows(0, F * p * p);
  const std::vector<int64_t> last(1, F * p * p);
  const Act feats = s.act(first_);                              // [F * g*g, C]
  const Act pooled = row_slice(s.act(first_ + 1), 0, F * p * p);  // [F * p*p, C]
  vision_.forward(s, frames, feats);
  for (int64_t t = 0; t < F; ++t)
    rows_->bilinear(s, row_slice(feats, t * per_tile, per_tile), g, g, p, p, row_slice(pooled, t * p * p, p * p));
  rows_->gather_rows(s, pooled, pooled_rows, row_slice(out, 0, F * p * p), 0);
  newline_->write(s, 0, last, out);
}

}  // namespace vlm
