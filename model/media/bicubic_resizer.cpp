// resize_bicubic (PIL's bicubic resize on 8-bit RGB; contracts in model/media/image_preprocess.h),
// its reference, its taps for the GPU, and BicubicResizer (the same for many frames of one size).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"
#include "kernels/core/thread_pool.h"
#include "model/media/image_preprocess.h"
#include "model/media/resize_hpass_simd.h"

namespace vlm {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL: 8-bit result, 2 bits of headroom

double bicubic(double x) {  // a = -0.5
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// One output sample's taps: input range [first, first + count) and fixed-point weights.
struct Taps {
  int first = 0;
  int count = 0;
  const int32_t* w = nullptr;
};

// Coefficients of one output sample xx, in floating point then fixed point (PIL's arithmetic).
int sample_taps(int in_size, int out_size, int xx, int32_t* w /*[ksize]*/, int* first) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  const double center = (xx + 0.5) * scale;
  const double ss = 1.0 / filterscale;
  int xmin = static_cast<int>(center - support + 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = static_cast<int>(center + support + 0.5);
  if (xmax > in_size) xmax = in_size;
  xmax -= xmin;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  std::vector<double> k(static_cast<size_t>(ksize), 0.0);
  double ww = 0.0;
  for (int x = 0; x < xmax; ++x) {
    k[x] = bicubic((x + xmin - center + 0.5) * ss);
    ww += k[x];
  }
  for (int x = 0; x < xmax; ++x)
    if (ww != 0.0) k[x] /= ww;
  for (int x = 0; x < ksize; ++x)
    w[x] = k[x] < 0 ? static_cast<int32_t>(-0.5 + k[x] * (1 << kPrecisionBits))
                    : static_cast<int32_t>(0.5 + k[x] * (1 << kPrecisionBits));
  *first = xmin;
  return xmax;
}

int kernel_size(int in_size, int out_size) {
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  return static_cast<int>(std::ceil(2.0 * std::max(scale, 1.0))) * 2 + 1;
}

struct AxisCoeffs {
  int ksize = 0;
  std::vector<int> first, count;  // [out]
  std::vector<int32_t> w;         // [out, ksize]
  Taps taps(int i) const { return {first[i], count[i], w.data() + static_cast<size_t>(i) * ksize}; }
};

AxisCoeffs axis_coeffs(int in_size, int out_size) {
  AxisCoeffs c;
  c.ksize = kernel_size(in_size, out_size);
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.w.resize(static_cast<size_t>(out_size) * c.ksize);
  for (int i = 0; i < out_size; ++i)
    c.count[i] = sample_taps(in_size, out_size, i, c.w.data() + static_cast<size_t>(i) * c.ksize, &c.first[i]);
  return c;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

// fn(0, n) on `pool`, or on the calling thread when pool is null.
void run_on(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (pool) pool->parallel_for(n, fn, grain);
  else fn(0, n);
}

// Horizontal pass over input rows [y0, y0 + rows) into out[rows, out_w, 3]. Rows go in tiles of
// kTile: a tile is transposed to tile[x][r * 3 + c] so that one output column is a sum over taps
// of contiguous 48-lane vectors (the same integer sums as one pixel at a time; resize_bicubic_ref
// is the reference). With AVX2, hpass_tile_avx2 (intrinsics), picked at run time.
constexpr int kTile = kResizeTileRows, kLanes = kTile * 3;

// Tile rows [r0, r0 + nr) of the pass; `tile` holds [in.width, kLanes] bytes.
__attribute__((always_inline)) inline void hpass_tile_body(const RgbImage& in, int y0, int r0, int nr,
                                                          const AxisCoeffs& c, RgbImage& out, uint8_t* tile) {
  const int in_w = in.width;
  const int out_w = static_cast<int>(c.first.size());
  for (int r = 0; r < nr; ++r) {
    const uint8_t* src = in.at(y0 + r0 + r, 0);
    uint8_t* dst = tile + r * 3;
    for (int x = 0; x < in_w; ++x, src += 3, dst += kLanes) dst[0] = src[0], dst[1] = src[1], dst[2] = src[2];
  }
  for (int xx = 0; xx < out_w; ++xx) {
    const Taps t = c.taps(xx);
    int32_t acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = 1 << (kPrecisionBits - 1);
    const uint8_t* p = tile + static_cast<size_t>(t.first) * kLanes;
    for (int x = 0; x < t.count; ++x, p += kLanes) {
      const int32_t k = t.w[x];
      for (int j = 0; j < kLanes; ++j) acc[j] += p[j] * k;
    }
    uint8_t res[kLanes];
    for (int j = 0; j < kLanes; ++j) res[j] = static_cast<uint8_t>(std::clamp(acc[j] >> kPrecisionBits, 0, 255));
    for (int r = 0; r < nr; ++r) std::memcpy(out.at(r0 + r, xx), res + r * 3, 3);
  }
}
void hpass_tile_base(const RgbImage& in, int y0, int r0, int nr, const AxisCoeffs& c, RgbImage& out, uint8_t* tile) {
  hpass_tile_body(in, y0, r0, nr, c, out, tile);
}
// The AVX2 intrinsics' tile (model/media/resize_hpass_simd.h): the same bytes.
void hpass_tile_avx2(const RgbImage& in, int y0, int r0, int nr, const AxisCoeffs& c, RgbImage& out, uint8_t* tile) {
  const uint8_t* rows[kTile];
  uint8_t* out_rows[kTile];
  for (int r = 0; r < nr; ++r) rows[r] = in.at(y0 + r0 + r, 0), out_rows[r] = out.at(r0 + r, 0);
  resize_hpass_tile_avx2(rows, nr, in.width, static_cast<int>(c.first.size()), c.first.data(), c.count.data(),
                         c.w.data(), c.ksize, out_rows, tile);
}

// scratch: null, or (pool null) [in_w + out_w, kLanes] bytes zeroed once, kept by the caller.
void resample_rows(const RgbImage& in, int y0, int rows, const AxisCoeffs& c, RgbImage& out, ThreadPool* pool,
                   std::vector<uint8_t>* scratch = nullptr) {
  const int64_t tiles = (rows + kTile - 1) / kTile;
  auto* hpass = hpass_tile_base;
#if defined(__x86_64__)
  if (cpu_has_avx2_fma()) hpass = hpass_tile_avx2;
#endif
  run_on(pool, tiles, [&](int64_t t0, int64_t t1) {
    std::vector<uint8_t> own;
    std::vector<uint8_t>& tile = scratch && !pool ? *scratch : own;
    tile.resize(static_cast<size_t>(in.width + out.width) * kLanes);  // [in_w + out_w, kTile * 3]
    for (int64_t ti = t0; ti < t1; ++ti) {
      const int r0 = static_cast<int>(ti * kTile);
      hpass(in, y0, r0, std::min(kTile, rows - r0), c, out, tile.data());
    }
  }, 1);
}

// Vertical pass: out row yy reads input rows first[yy] - shift ...
// One output row of the vertical pass (acc: [n] scratch), built for AVX2 too.
__attribute__((always_inline)) inline void vpass_row_body(const RgbImage& in, int shift, const Taps& t, int n,
                                                         int32_t* acc, uint8_t* o) {
  for (int i = 0; i < n; ++i) acc[i] = 1 << (kPrecisionBits - 1);
  for (int y = 0; y < t.count; ++y) {
    const uint8_t* p = in.at(t.first - shift + y, 0);
    const int32_t k = t.w[y];
    for (int i = 0; i < n; ++i) acc[i] += p[i] * k;
  }
  for (int i = 0; i < n; ++i) o[i] = static_cast<uint8_t>(std::clamp(acc[i] >> kPrecisionBits, 0, 255));
}
void vpass_row_base(const RgbImage& in, int shift, const Taps& t, int n, int32_t* acc, uint8_t* o) {
  vpass_row_body(in, shift, t, n, acc, o);
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void vpass_row_avx2(const RgbImage& in, int shift, const Taps& t, int n, int32_t* acc,
                                                    uint8_t* o) {
  vpass_row_body(in, shift, t, n, acc, o);
}
#endif

// scratch: null, or (pool null) the [in_w * 3] sums, kept by the caller.
void resample_cols(const RgbImage& in, int shift, const AxisCoeffs& c, RgbImage& out, ThreadPool* pool,
                   std::vector<int32_t>* scratch = nullptr) {
  const int out_h = static_cast<int>(c.first.size());
  const int n = in.width * 3;
  auto* vpass = vpass_row_base;
#if defined(__x86_64__)
  if (cpu_has_avx2_fma()) vpass = vpass_row_avx2;
#endif
  run_on(pool, out_h, [&](int64_t y0, int64_t y1) {
    std::vector<int32_t> own;
    std::vector<int32_t>& acc = scratch && !pool ? *scratch : own;
    acc.resize(static_cast<size_t>(n));
    for (int64_t yy = y0; yy < y1; ++yy)
      vpass(in, shift, c.taps(static_cast<int>(yy)), n, acc.data(), out.at(static_cast<int>(yy), 0));
  }, 4);
}

RgbImage blank(int w, int h) {
  RgbImage r;
  r.width = w;
  r.height = h;
  r.pixels.resize(static_cast<size_t>(w) * h * 3);
  return r;
}

}  // namespace

ResizeAxisTaps resize_axis_taps(int in_size, int out_size) {
  static_assert(kResizePrecisionBits == kPrecisionBits);
  VLM_CHECK(in_size > 0 && out_size > 0, "resize taps {} -> {}", in_size, out_size);
  AxisCoeffs c = axis_coeffs(in_size, out_size);
  ResizeAxisTaps t;
  t.ksize = c.ksize;
  t.first.assign(c.first.begin(), c.first.end());
  t.count.assign(c.count.begin(), c.count.end());
  t.w = std::move(c.w);
  return t;
}

RgbImage resize_bicubic(const RgbImage& img, int out_w, int out_h) {
  return resize_bicubic(img, out_w, out_h, &global_thread_pool());
}

RgbImage resize_bicubic(const RgbImage& img, int out_w, int out_h, ThreadPool* pool) {
  VLM_CHECK(out_w > 0 && out_h > 0 && img.width > 0 && img.height > 0, "resize {}x{} -> {}x{}",
            img.width, img.height, out_w, out_h);
  if (out_w == img.width && out_h == img.height) return img;  // PIL returns a copy
  const AxisCoeffs cv = axis_coeffs(img.height, out_h);
  const int y_first = cv.first.front();
  const int y_last = cv.first.back() + cv.count.back();
  const RgbImage* src = &img;
  RgbImage tmp;
  int shift = 0;
  if (out_w != img.width) {
    const AxisCoeffs ch = axis_coeffs(img.width, out_w);
    tmp = blank(out_w, y_last - y_first);
    resample_rows(img, y_first, y_last - y_first, ch, tmp, pool);
    src = &tmp;
    shift = y_first;
  }
  if (out_h == img.height) return tmp;  // only the horizontal pass (all rows were used)
  RgbImage out = blank(src->width, out_h);
  resample_cols(*src, shift, cv, out, pool);
  return out;
}

RgbImage resize_bicubic_ref(const RgbImage& img, int out_w, int out_h) {
  VLM_CHECK(out_w > 0 && out_h > 0 && img.width > 0 && img.height > 0, "resize {}x{} -> {}x{}",
            img.width, img.height, out_w, out_h);
  if (out_w == img.width && out_h == img.height) return img;
  RgbImage mid = img;
  if (out_w != img.width) {
    mid = blank(out_w, img.height);
    std::vector<int32_t> w(static_cast<size_t>(kernel_size(img.width, out_w)));
    for (int xx = 0; xx < out_w; ++xx) {
      int first = 0;
      const int n = sample_taps(img.width, out_w, xx, w.data(), &first);
      for (int y = 0; y < img.height; ++y)
        for (int c = 0; c < 3; ++c) {
          int32_t s = 1 << (kPrecisionBits - 1);
          for (int x = 0; x < n; ++x) s += img.at(y, first + x)[c] * w[x];
          mid.at(y, xx)[c] = clip8(s);
        }
    }
  }
  if (out_h == img.height) return mid;
  RgbImage out = blank(mid.width, out_h);
  std::vector<int32_t> w(static_cast<size_t>(kernel_size(img.height, out_h)));
  for (int yy = 0; yy < out_h; ++yy) {
    int first = 0;
    const int n = sample_taps(img.height, out_h, yy, w.data(), &first);
    for (int x = 0; x < mid.width; ++x)
      for (int c = 0; c < 3; ++c) {
        int32_t s = 1 << (kPrecisionBits - 1);
        for (int y = 0; y < n; ++y) s += mid.at(first + y, x)[c] * w[y];
        out.at(yy, x)[c] = clip8(s);
      }
  }
  return out;
}

struct BicubicResizer::Impl {
  int in_w = 0, in_h = 0, out_w = 0, out_h = 0;
  AxisCoeffs ch, cv;          // horizontal (when out_w != in_w), vertical taps
  int y_first = 0, y_rows = 0;  // input rows the vertical pass reads
  RgbImage tmp;               // the horizontal pass's [y_rows, out_w] result
  std::vector<uint8_t> tile;  // the horizontal pass's scratch
  std::vector<int32_t> acc;   // the vertical pass's scratch
};

BicubicResizer::BicubicResizer(int in_w, int in_h, int out_w, int out_h) : impl_(std::make_unique<Impl>()) {
  VLM_CHECK(out_w > 0 && out_h > 0 && in_w > 0 && in_h > 0, "resize {}x{} -> {}x{}", in_w, in_h, out_w, out_h);
  Impl& m = *impl_;
  m.in_w = in_w, m.in_h = in_h, m.out_w = out_w, m.out_h = out_h;
  m.cv = axis_coeffs(in_h, out_h);
  m.y_first = m.cv.first.front();
  m.y_rows = m.cv.first.back() + m.cv.count.back() - m.y_first;
  if (out_w != in_w) m.ch = axis_coeffs(in_w, out_w);
}

BicubicResizer::~BicubicResizer() = default;

void BicubicResizer::resize(const RgbImage& img, RgbImage& out) {
  Impl& m = *impl_;
  VLM_CHECK(img.width == m.in_w && img.height == m.in_h, "BicubicResizer for {}x{} given {}x{}", m.in_w, m.in_h,
            img.width, img.height);
  auto shape = [](RgbImage& r, int w, int h) {  // reuses the allocation; every byte is written
    r.width = w;
    r.height = h;
    r.pixels.resize(static_cast<size_t>(w) * h * 3);
  };
  if (m.out_w == m.in_w && m.out_h == m.in_h) {  // PIL returns a copy
    shape(out, m.in_w, m.in_h);
    std::copy(img.pixels.begin(), img.pixels.end(), out.pixels.begin());
    return;
  }
  const RgbImage* src = &img;
  int shift = 0;
  if (m.out_w != m.in_w) {
    if (m.out_h == m.in_h) {  // only the horizontal pass (all rows are used)
      shape(out, m.out_w, m.in_h);
      resample_rows(img, 0, m.in_h, m.ch, out, nullptr, &m.tile);
      return;
    }
    shape(m.tmp, m.out_w, m.y_rows);
    resample_rows(img, m.y_first, m.y_rows, m.ch, m.tmp, nullptr, &m.tile);
    src = &m.tmp;
    shift = m.y_first;
  }
  shape(out, src->width, m.out_h);
  resample_cols(*src, shift, m.cv, out, nullptr, &m.acc);
}

}  // namespace vlm
