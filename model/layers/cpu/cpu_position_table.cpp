// The CPU's PositionTable (model/layers/layers.h): Qwen3-VL's learned position grid sampled
// bilinearly at each item's patch grid, f32 as transformers 5.17 computes it
// (Qwen3VLVisionModel.fast_pos_embed_interpolate, restated; no code taken). The sample points are
// torch.linspace(0, N - 1, n) in f32, which torch's CPU kernel forms as step = (N - 1) / (n - 1)
// and point i = i * step for i < n / 2, (N - 1) - (n - 1 - i) * step above; .int() truncates.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/check.h"
#include "model/layers/cpu/cpu_vision_layers.h"

namespace vlm {

std::vector<float> linspace_f32(float end, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (n == 1) {
    v[0] = 0.0f;
    return v;
  }
  const float step = end / static_cast<float>(n - 1);
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = i < n / 2 ? static_cast<float>(i) * step : end - static_cast<float>(n - 1 - i) * step;
  return v;
}

namespace {

class CpuPositionTable final : public PositionTable {
 public:
  CpuPositionTable(const WeightSource& w, const PositionTableSpec& spec) : spec_(spec) {
    VLM_CHECK(spec.side > 0 && spec.merge > 0 && spec.table.shape.ndim == 2 &&
                  spec.table.shape[0] == spec.side * spec.side,
              "position table {} for an {} x {} grid", spec.table.name, spec.side, spec.side);
    const TensorView t = w.get(spec.table);
    C_ = t.dim(1);
    table_.resize(static_cast<size_t>(t.numel()));
    convert_to_f32(t.data, t.dtype, table_.data(), t.numel());
  }

  void add(Step&, std::span<const std::array<int32_t, 3>> grids, Act x) const override {
    const int64_t N = spec_.side, ms = spec_.merge, C = C_;
    int64_t P = 0;
    for (const auto& g : grids) {
      VLM_CHECK(g[0] > 0 && g[1] > 0 && g[2] > 0 && g[1] % ms == 0 && g[2] % ms == 0, "grid {}x{}x{} (merge {})", g[0],
                g[1], g[2], ms);
      P += static_cast<int64_t>(g[0]) * g[1] * g[2];
    }
    VLM_CHECK(x.rows == P && x.cols == C, "positions of {} patches of {} into [{}, {}]", P, C, x.rows, x.cols);
    std::vector<float> e(static_cast<size_t>(C));  // one interpolated row
    float* xp = x.f32();
    int64_t base = 0;
    for (const auto& g : grids) {
      const int64_t t = g[0], h = g[1], w = g[2];
      const std::vector<float> ph = linspace_f32(static_cast<float>(N - 1), h), pw = linspace_f32(static_cast<float>(N - 1), w);
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < w; ++j) {
          const int64_t fh = static_cast<int64_t>(ph[static_cast<size_t>(i)]), fw = static_cast<int64_t>(pw[static_cast<size_t>(j)]);
          const int64_t ch = std::min(fh + 1, N - 1), cw = std::min(fw + 1, N - 1);
          const float dh = ph[static_cast<size_t>(i)] - static_cast<float>(fh);
          const float dw = pw[static_cast<size_t>(j)] - static_cast<float>(fw);
          const float wt[4] = {(1.0f - dh) * (1.0f - dw), (1.0f - dh) * dw, dh * (1.0f - dw), dh * dw};
          const float* r[4] = {row(fh * N + fw), row(fh * N + cw), row(ch * N + fw), row(ch * N + cw)};
          for (int64_t k = 0; k < C; ++k) {
            const float a = r[0][k] * wt[0], b = r[1][k] * wt[1], c = r[2][k] * wt[2], d = r[3][k] * wt[3];
            e[static_cast<size_t>(k)] = ((a + b) + c) + d;
          }
          // Patch (i, j) is patch (i % ms, j % ms) of merged unit (i / ms, j / ms), units row-major.
          const int64_t in_frame = ((i / ms) * (w / ms) + j / ms) * ms * ms + (i % ms) * ms + j % ms;
          for (int64_t f = 0; f < t; ++f) {
            float* dst = xp + (base + f * h * w + in_frame) * C;
            for (int64_t k = 0; k < C; ++k) dst[k] += e[static_cast<size_t>(k)];
          }
        }
      base += t * h * w;
    }
  }

 private:
  const float* row(int64_t r) const { return table_.data() + r * C_; }
  PositionTableSpec spec_;
  int64_t C_ = 0;
  std::vector<float> table_;  // [N*N, C] f32
};

}  // namespace

std::unique_ptr<PositionTable> make_cpu_position_table(const WeightSource& w, const PositionTableSpec& spec) {
  return std::make_unique<CpuPositionTable>(w, spec);
}

}  // namespace vlm
