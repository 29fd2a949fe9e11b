// model/arch/qwen3_vl_vision_tower.h on CpuLayers against a naive double-precision tower written
// here from transformers 5.17's Qwen3VLVisionModel (patch embed with bias, the interpolated
// position grid, 2-D rope, LayerNorm / gelu_tanh blocks within frames, the merger and the
// DeepStack mergers), on random weights: an image and a two-frame video whose grids are larger,
// smaller and equal to the position table's. Also the PositionTable layer alone and the layout.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/arch/qwen3_vl_vision_tower.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

using Grid = std::array<int32_t, 3>;

// Random f32 tensors by name, uniform in [-scale, scale] (norm weights around 1).
struct RandomTensors {
  std::map<std::string, Tensor> store;
  std::mt19937 rng{11};
  TensorView operator()(const std::string& name, const Shape& shape) {
    auto it = store.find(name);
    if (it != store.end()) return it->second.view();
    Tensor t = Tensor::empty(shape, DType::F32);
    const bool norm_w = name.find("norm") != std::string::npos && name.find(".weight") != std::string::npos;
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = norm_w ? 1.0f + u(rng) : u(rng);
    return store.emplace(name, std::move(t)).first->second.view();
  }
  const float* at(const std::string& n) const { return store.at(n).as<float>(); }
};

Qwen3VLVisionConfig tiny() {
  Qwen3VLVisionConfig c;
  c.depth = 3;
  c.hidden_size = 16;  // 2 heads of 8
  c.num_heads = 2;
  c.intermediate_size = 24;
  c.out_hidden_size = 12;
  c.num_position_embeddings = 16;  // a 4 x 4 table
  c.patch_size = 2;
  c.temporal_patch_size = 2;  // K = 24
  c.spatial_merge_size = 2;
  c.deepstack_visual_indexes = {2, 0};  // out of order: DeepStack k follows block indexes[k]
  return c;
}

using Mat = std::vector<double>;  // row-major

// y [n, out] = x [n, in] W^T + b, W [out, in] f32.
Mat linear(const Mat& x, int64_t n, int64_t in, const float* W, const float* b, int64_t out) {
  Mat y(static_cast<size_t>(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(r * in + i)] * W[o * in + i];
      y[static_cast<size_t>(r * out + o)] = s;
    }
  return y;
}

Mat layer_norm(const Mat& x, int64_t n, int64_t C, const float* w, const float* b, double eps) {
  Mat y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < C; ++i) mean += x[static_cast<size_t>(r * C + i)];
    mean /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i) var += std::pow(x[static_cast<size_t>(r * C + i)] - mean, 2);
    var /= static_cast<double>(C);
    for (int64_t i = 0; i < C; ++i)
      y[static_cast<size_t>(r * C + i)] = (x[static_cast<size_t>(r * C + i)] - mean) / std::sqrt(var + eps) * w[i] + b[i];
  }
  return y;
}

double gelu_tanh(double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }
double gelu_erf(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

// The interpolated positions of one item's h x w grid in row-major (row, column) order.
Mat interpolated(const float* table, int64_t N, int64_t C, int64_t h, int64_t w) {
  auto points = [&](int64_t n) {
    std::vector<double> p(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < n && n > 1; ++i) p[static_cast<size_t>(i)] = static_cast<double>(i) * (N - 1) / (n - 1);
    return p;
  };
  const auto ph = points(h), pw = points(w);
  Mat m(static_cast<size_t>(h * w * C));
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t fh = static_cast<int64_t>(std::floor(ph[static_cast<size_t>(i)]));
      const int64_t fw = static_cast<int64_t>(std::floor(pw[static_cast<size_t>(j)]));
      const int64_t ch = std::min(fh + 1, N - 1), cw = std::min(fw + 1, N - 1);
      const double dh = ph[static_cast<size_t>(i)] - fh, dw = pw[static_cast<size_t>(j)] - fw;
      for (int64_t k = 0; k < C; ++k)
        m[static_cast<size_t>((i * w + j) * C + k)] =
            table[(fh * N + fw) * C + k] * (1 - dh) * (1 - dw) + table[(fh * N + cw) * C + k] * (1 - dh) * dw +
            table[(ch * N + fw) * C + k] * dh * (1 - dw) + table[(ch * N + cw) * C + k] * dh * dw;
    }
  return m;
}

// Row index p of a frame's merge-block order -> (row, column): view(h/2, 2, w/2, 2).permute(0, 2, 1, 3).
std::pair<int64_t, int64_t> patch_rc(int64_t p, int64_t w, int64_t ms) {
  const int64_t per_unit = ms * ms, uw = w / ms, u = p / per_unit, m = p % per_unit;
  return {(u / uw) * ms + m / ms, (u % uw) * ms + m % ms};
}

// The whole tower in double: planes [(1 + K) * U, C].
Mat naive_tower(const Qwen3VLVisionConfig& c, const RandomTensors& t, const std::vector<float>& px,
                const std::vector<Grid>& grids) {
  const int64_t Cv = c.hidden_size, H = c.num_heads, D = c.head_dim(), K = c.patch_dim(), ms = c.spatial_merge_size;
  const int64_t N = c.grid_side(), I = c.intermediate_size, M = Cv * ms * ms, Co = c.out_hidden_size;
  int64_t P = 0;
  for (const Grid& g : grids) P += int64_t{g[0]} * g[1] * g[2];
  const int64_t U = P / (ms * ms);
  const std::string v = "v.";
  Mat pix(px.begin(), px.end());
  Mat x = linear(pix, P, K, t.at(v + "patch_embed.proj.weight"), t.at(v + "patch_embed.proj.bias"), Cv);
  // positions and (row, column) per patch; segments per frame
  std::vector<int64_t> row(static_cast<size_t>(P)), col(static_cast<size_t>(P)), seg(static_cast<size_t>(P));
  int64_t base = 0, frame = 0;
  for (const Grid& g : grids) {
    const Mat m = interpolated(t.at(v + "pos_embed.weight"), N, Cv, g[1], g[2]);
    for (int64_t f = 0; f < g[0]; ++f, ++frame)
      for (int64_t p = 0; p < int64_t{g[1]} * g[2]; ++p) {
        const auto [r, cl] = patch_rc(p, g[2], ms);
        const int64_t at = base + f * g[1] * g[2] + p;
        row[static_cast<size_t>(at)] = r, col[static_cast<size_t>(at)] = cl, seg[static_cast<size_t>(at)] = frame;
        for (int64_t k = 0; k < Cv; ++k) x[static_cast<size_t>(at * Cv + k)] += m[static_cast<size_t>((r * g[2] + cl) * Cv + k)];
      }
    base += int64_t{g[0]} * g[1] * g[2];
  }
  // rope angles [P, D/2]: D/4 by row, D/4 by column, theta 10000 over D/2 dims
  auto rotate = [&](double* q, int64_t p) {
    std::vector<double> out(static_cast<size_t>(D));
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = d % (D / 2);
      const double f = std::pow(c.rope_theta, -2.0 * static_cast<double>(i % (D / 4)) / static_cast<double>(D / 2));
      const double ang = (i < D / 4 ? row[static_cast<size_t>(p)] : col[static_cast<size_t>(p)]) * f;
      const double rh = d < D / 2 ? -q[d + D / 2] : q[d - D / 2];
      out[static_cast<size_t>(d)] = q[d] * std::cos(ang) + rh * std::sin(ang);
    }
    std::copy(out.begin(), out.end(), q);
  };
  Mat planes(static_cast<size_t>((1 + c.num_deepstack()) * U * Co));
  auto merger = [&](const Mat& in /*[U, M]*/, const std::string& p, int64_t plane) {
    Mat hdn = linear(in, U, M, t.at(v + p + "linear_fc1.weight"), t.at(v + p + "linear_fc1.bias"), M);
    for (double& e : hdn) e = gelu_erf(e);
    const Mat o = linear(hdn, U, M, t.at(v + p + "linear_fc2.weight"), t.at(v + p + "linear_fc2.bias"), Co);
    std::copy(o.begin(), o.end(), planes.begin() + plane * U * Co);
  };
  for (int64_t l = 0; l < c.depth; ++l) {
    const std::string b = v + "blocks." + std::to_string(l) + ".";
    const Mat h1 = layer_norm(x, P, Cv, t.at(b + "norm1.weight"), t.at(b + "norm1.bias"), 1e-6);
    Mat qkv = linear(h1, P, Cv, t.at(b + "attn.qkv.weight"), t.at(b + "attn.qkv.bias"), 3 * Cv);  // [P, 3Cv]
    for (int64_t p = 0; p < P; ++p)
      for (int64_t hd = 0; hd < H; ++hd) {
        rotate(&qkv[static_cast<size_t>(p * 3 * Cv + hd * D)], p);
        rotate(&qkv[static_cast<size_t>(p * 3 * Cv + Cv + hd * D)], p);
      }
    Mat att(static_cast<size_t>(P * Cv), 0.0);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t hd = 0; hd < H; ++hd) {
        std::vector<double> s(static_cast<size_t>(P), -INFINITY);
        double mx = -INFINITY;
        for (int64_t q = 0; q < P; ++q) {
          if (seg[static_cast<size_t>(q)] != seg[static_cast<size_t>(p)]) continue;
          double d = 0;
          for (int64_t e = 0; e < D; ++e)
            d += qkv[static_cast<size_t>(p * 3 * Cv + hd * D + e)] * qkv[static_cast<size_t>(q * 3 * Cv + Cv + hd * D + e)];
          s[static_cast<size_t>(q)] = d / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[static_cast<size_t>(q)]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t q = 0; q < P; ++q)
          for (int64_t e = 0; e < D; ++e)
            att[static_cast<size_t>(p * Cv + hd * D + e)] +=
                s[static_cast<size_t>(q)] / z * qkv[static_cast<size_t>(q * 3 * Cv + 2 * Cv + hd * D + e)];
      }
    const Mat pr = linear(att, P, Cv, t.at(b + "attn.proj.weight"), t.at(b + "attn.proj.bias"), Cv);
    for (size_t i = 0; i < x.size(); ++i) x[i] += pr[i];
    Mat f = linear(layer_norm(x, P, Cv, t.at(b + "norm2.weight"), t.at(b + "norm2.bias"), 1e-6), P, Cv,
                   t.at(b + "mlp.linear_fc1.weight"), t.at(b + "mlp.linear_fc1.bias"), I);
    for (double& e : f) e = gelu_tanh(e);
    const Mat o = linear(f, P, I, t.at(b + "mlp.linear_fc2.weight"), t.at(b + "mlp.linear_fc2.bias"), Cv);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    for (size_t k = 0; k < c.deepstack_visual_indexes.size(); ++k)
      if (c.deepstack_visual_indexes[k] == l) {  // view [U, M] first, then the norm over M
        const std::string p = "deepstack_merger_list." + std::to_string(k) + ".";
        merger(layer_norm(x, U, M, t.at(v + p + "norm.weight"), t.at(v + p + "norm.bias"), 1e-6), p,
               static_cast<int64_t>(k) + 1);
      }
  }
  merger(layer_norm(x, P, Cv, t.at(v + "merger.norm.weight"), t.at(v + "merger.norm.bias"), 1e-6), "merger.", 0);
  return planes;
}

TEST(Qwen3VLVisionTower, MatchesNaiveDoubleTower) {
  const Qwen3VLVisionConfig c = tiny();
  RandomTensors t;
  const WeightSource w([&t](const std::string& n, const Shape& s) { return t(n, s); }, "v.");
  CpuLayers layers;
  const Qwen3VLVisionTower tower(c, layers, w);
  // An image larger than the 4 x 4 table one way and smaller the other, a two-frame video of the
  // table's own size (integer sample points), an image of one merged unit.
  const std::vector<Grid> grids = {{1, 6, 2}, {2, 4, 4}, {1, 2, 2}};
  const Qwen3VLVisionLayout lay = qwen3_vl_vision_layout(c, grids);
  const int64_t P = lay.num_patches, U = P / 4, Co = c.out_hidden_size, planes = 1 + c.num_deepstack();
  ASSERT_EQ(P, 12 + 32 + 4);
  std::vector<float> px(static_cast<size_t>(P * c.patch_dim()));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& e : px) e = u(rng);
  std::vector<float> out(static_cast<size_t>(planes * U * Co));
  const ActivationPlan plan = tower.plan(lay);
  CpuStep step(plan, P);
  tower.forward(step, Act{px.data(), P, c.patch_dim(), DType::F32}, lay, Act{out.data(), planes * U, Co, DType::F32});
  const Mat want = naive_tower(c, t, px, grids);
  for (int64_t r = 0; r < planes * U; ++r) {
    double scale = 0, err = 0;
    for (int64_t k = 0; k < Co; ++k) {
      scale = std::max(scale, std::abs(want[static_cast<size_t>(r * Co + k)]));
      err = std::max(err, std::abs(want[static_cast<size_t>(r * Co + k)] - out[static_cast<size_t>(r * Co + k)]));
    }
    EXPECT_LE(err, 1e-5 * scale) << "plane " << r / U << " row " << r % U << " scale " << scale;
  }
}

TEST(Qwen3VLVisionTower, LayoutIsMergeBlockOrderPerFrame) {
  const Qwen3VLVisionConfig c = tiny();
  const std::vector<Grid> grids = {{2, 2, 4}};
  const Qwen3VLVisionLayout lay = qwen3_vl_vision_layout(c, grids);
  EXPECT_EQ(lay.frame_cu, (std::vector<int64_t>{0, 8, 16}));
  // units (0,0), (0,1); patches (0,0) (0,1) (1,0) (1,1) of each
  const std::vector<int32_t> frame = {0, 0, 0, 1, 1, 0, 1, 1, 0, 2, 0, 3, 1, 2, 1, 3};
  std::vector<int32_t> want = frame;
  want.insert(want.end(), frame.begin(), frame.end());
  EXPECT_EQ(lay.pos_hw, want);
  const std::vector<Grid> odd = {{1, 3, 4}};
  EXPECT_THROW(qwen3_vl_vision_layout(c, odd), InternalError);
}

// The layer alone: on a grid the table's size the sample points are the table's own rows.
TEST(CpuPositionTable, TableSizedGridAddsTheTableInMergeBlockOrder) {
  RandomTensors t;
  const WeightSource w([&t](const std::string& n, const Shape& s) { return t(n, s); }, "");
  CpuLayers layers;
  const auto pos = layers.position_table(w, {{"pos", {16, 3}}, 4, 2});
  std::vector<float> x(16 * 3, 1.0f);
  ActivationPlan plan;
  CpuStep step(plan, 16);
  const std::vector<Grid> grids = {{1, 4, 4}};
  pos->add(step, grids, Act{x.data(), 16, 3, DType::F32});
  const float* tab = t.at("pos");
  for (int64_t p = 0; p < 16; ++p) {
    const auto [r, cl] = patch_rc(p, 4, 2);
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(x[static_cast<size_t>(p * 3 + k)], 1.0f + tab[(r * 4 + cl) * 3 + k]) << p;
  }
  std::vector<float> small(4 * 3, 0.0f);
  EXPECT_THROW(pos->add(step, grids, Act{small.data(), 4, 3, DType::F32}), InternalError);
}

// A backend without the layer (LayerBackend's default) refuses it at load, naming it.
TEST(CpuPositionTable, ABackendWithoutItRefusesTheSpec) {
  RandomTensors t;
  const WeightSource w([&t](const std::string& n, const Shape& s) { return t(n, s); }, "");
  CpuLayers layers;
  try {
    layers.LayerBackend::position_table(w, qwen3_vl_vision_position_spec(tiny()));
    FAIL() << "no LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("PositionTable, Qwen3-VL's pos_embed.weight"), std::string::npos) << e.what();
  }
}

TEST(Qwen3VLVisionTower, MissingTensorIsNamed) {
  Qwen3VLVisionConfig c = tiny();
  RandomTensors t;
  const WeightSource w(
      [&t](const std::string& n, const Shape& s) {
        if (n == "v.deepstack_merger_list.1.norm.weight") throw LoadError("missing tensor " + n);
        return t(n, s);
      },
      "v.");
  CpuLayers layers;
  try {
    Qwen3VLVisionTower tower(c, layers, w);
    FAIL() << "built without the tensor";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("deepstack_merger_list.1.norm.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vlm
