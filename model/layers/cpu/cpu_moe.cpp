#include "model/layers/cpu/cpu_moe.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops.h"
#include "model/layers/cpu/cpu_linear.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

// Rows [row, row + n) of a 3-D tensor's slice e, as an [n, cols] view.
TensorView slab(const TensorView& t, int64_t e, int64_t row, int64_t n) {
  const int64_t rows = t.dim(1), cols = t.dim(2);
  auto* base = static_cast<char*>(t.data) + ((e * rows + row) * cols) * static_cast<int64_t>(dtype_size(t.dtype));
  return TensorView(base, t.dtype, Shape{n, cols});
}

template <typename T>
void transpose_slice(const T* s /*[R,K]*/, int64_t R, int64_t K, T* d /*[K,R]*/) {
  constexpr int64_t B = 32;  // tiles of B x B: reads and writes both stay within a few lines
  for (int64_t r0 = 0; r0 < R; r0 += B)
    for (int64_t k0 = 0; k0 < K; k0 += B)
      for (int64_t r = r0; r < std::min(R, r0 + B); ++r)
        for (int64_t k = k0; k < std::min(K, k0 + B); ++k) d[k * R + r] = s[r * K + k];
}

// src [E, R, K] -> a new tensor [E, K, R] of the same dtype (each slice transposed; slices split
// over the global thread pool).
Tensor transpose_slices(const TensorView& src) {
  const int64_t E = src.dim(0), R = src.dim(1), K = src.dim(2);
  Tensor dst = Tensor::empty(Shape{E, K, R}, src.dtype);
  const size_t es = dtype_size(src.dtype);
  VLM_CHECK(es == 2 || es == 4, "experts of {}-byte elements", es);
  global_thread_pool().parallel_for(E, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      const size_t off = static_cast<size_t>(e * R * K) * es;
      const char* s = static_cast<const char*>(src.data) + off;
      char* d = static_cast<char*>(dst.data()) + off;
      if (es == 2) transpose_slice(reinterpret_cast<const uint16_t*>(s), R, K, reinterpret_cast<uint16_t*>(d));
      else transpose_slice(reinterpret_cast<const uint32_t*>(s), R, K, reinterpret_cast<uint32_t*>(d));
    }
  });
  return dst;
}

class CpuMoe final : public Mlp {
 public:
  CpuMoe(const WeightSource& w, const MoeSpec& spec)
      : spec_(spec), pre_norm_(make_cpu_norm(w, spec.pre_norm ? &*spec.pre_norm : nullptr)) {
    const int64_t C = spec.hidden, I = spec.inner, E = spec.num_experts;
    VLM_CHECK(C > 0 && I > 0 && E > 0 && spec.top_k >= 1 && spec.top_k <= E,
              "mixture of experts {}: C={} I={} E={} top_k={}", spec.router.name, C, I, E, spec.top_k);
    router_ = w.get(spec.router.name, Shape{E, C});
    const std::string& p = spec.experts;
    switch (spec.layout) {
      case ExpertLayout::PerExpert:
        for (int64_t e = 0; e < E; ++e) {
          const std::string n = p + std::to_string(e) + ".";
          gate_.push_back(w.get(n + "gate_proj.weight", Shape{I, C}));
          up_.push_back(w.get(n + "up_proj.weight", Shape{I, C}));
          down_.push_back(w.get(n + "down_proj.weight", Shape{C, I}));
        }
        return;
      case ExpertLayout::Fused:
        views(w.get(p + "gate_up_proj", Shape{E, 2 * I, C}), w.get(p + "down_proj", Shape{E, C, I}));
        return;
      case ExpertLayout::FusedTransposed:
        gate_up_copy_ = transpose_slices(w.get(p + "gate_up_proj", Shape{E, C, 2 * I}));
        down_copy_ = transpose_slices(w.get(p + "down_proj", Shape{E, I, C}));
        views(gate_up_copy_.view(), down_copy_.view());
        return;
    }
  }

  int64_t inner_cols() const override { return spec_.num_experts + 2 * spec_.top_k * spec_.inner; }

  void forward(Step& st, Act x, Act inner, Act y, Accum a) const override {
    CpuStep& s = CpuStep::of(st);
    const int64_t T = x.rows, C = spec_.hidden, I = spec_.inner, E = spec_.num_experts, K = spec_.top_k;
    VLM_CHECK(x.cols == C && y.rows == T && y.cols == C && inner.rows * inner.cols >= T * inner_cols(),
              "mixture of experts {}: x [{}, {}], y [{}, {}], inner [{}, {}]", spec_.router.name, x.rows, x.cols, y.rows,
              y.cols, inner.rows, inner.cols);
    const float* h = x.f32();  // [T, C]
    if (pre_norm_) {
      float* n = s.scratch(CpuStep::kNormOut, T * C);
      pre_norm_->apply(x.f32(), T, n);
      h = n;
    }
    float* prob = inner.f32();      // [T, E]
    float* gate_up = prob + T * E;  // per expert group: planes gate [n, I], up [n, I]
    linear(h, T, router_, nullptr, prob);
    softmax_rows(prob, T, E);

    // Routing: token t's j-th choice (experts in increasing index) and its weight.
    std::vector<int32_t> chosen(static_cast<size_t>(T * K));
    std::vector<float> weight(static_cast<size_t>(T * K));
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::vector<int64_t> count(static_cast<size_t>(E) + 1, 0);
    for (int64_t t = 0; t < T; ++t) {
      const float* p = prob + t * E;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [p](int32_t i, int32_t j) { return p[i] > p[j] || (p[i] == p[j] && i < j); });
      float sum = 0.0f;
      for (int64_t j = 0; j < K; ++j) sum += p[order[static_cast<size_t>(j)]];
      std::sort(order.begin(), order.begin() + K);  // combine in increasing expert index
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = order[static_cast<size_t>(j)];
        chosen[static_cast<size_t>(t * K + j)] = e;
        weight[static_cast<size_t>(t * K + j)] = spec_.norm_topk_prob ? p[e] / sum : p[e];
        ++count[static_cast<size_t>(e) + 1];
      }
    }
    // Group the (token, expert) pairs by expert, tokens ascending: pair slot[t * K + j].
    std::vector<int64_t> begin(count.size(), 0);
    std::partial_sum(count.begin(), count.end(), begin.begin());  // begin[e] = first slot of expert e
    std::vector<int64_t> fill(begin.begin(), begin.end() - 1), slot(static_cast<size_t>(T * K));
    float* xin = s.scratch(CpuStep::kMoeIn, T * K * C);    // [T*K, C] grouped inputs
    float* out = s.scratch(CpuStep::kMoeOut, T * K * C);   // [T*K, C] the experts' outputs
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < K; ++j) {
        const int64_t r = fill[static_cast<size_t>(chosen[static_cast<size_t>(t * K + j)])]++;
        slot[static_cast<size_t>(t * K + j)] = r;
        std::memcpy(xin + r * C, h + t * C, static_cast<size_t>(C) * sizeof(float));
      }
    // One product per chosen expert over its tokens.
    for (int64_t e = 0; e < E; ++e) {
      const int64_t r0 = begin[static_cast<size_t>(e)], n = count[static_cast<size_t>(e) + 1];
      if (n == 0) continue;
      float* g = gate_up + r0 * 2 * I;  // [n, I]
      float* u = g + n * I;             // [n, I]
      const LinearTarget targets[2] = {{&gate_[static_cast<size_t>(e)], nullptr, g}, {&up_[static_cast<size_t>(e)], nullptr, u}};
      linear_multi(xin + r0 * C, n, targets);
      silu_mul(g, u, n, I, g);
      linear(g, n, down_[static_cast<size_t>(e)], nullptr, out + r0 * C);
    }
    // Combine: y[t] (+)= sum_j weight * out (experts in increasing index, then the residual add).
    std::vector<float> acc(static_cast<size_t>(C));
    for (int64_t t = 0; t < T; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < K; ++j) {
        const float wt = weight[static_cast<size_t>(t * K + j)];
        const float* o = out + slot[static_cast<size_t>(t * K + j)] * C;
        for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += o[c] * wt;
      }
      float* yr = y.f32() + t * C;
      if (a == Accum::Add) add_inplace(yr, acc.data(), C);
      else std::copy(acc.begin(), acc.end(), yr);
    }
  }

 private:
  void views(const TensorView& gate_up /*[E,2I,C]*/, const TensorView& down /*[E,C,I]*/) {
    const int64_t I = spec_.inner, C = spec_.hidden;
    for (int64_t e = 0; e < spec_.num_experts; ++e) {
      gate_.push_back(slab(gate_up, e, 0, I));
      up_.push_back(slab(gate_up, e, I, I));
      down_.push_back(slab(down, e, 0, C));
    }
  }

  MoeSpec spec_;
  std::unique_ptr<CpuNorm> pre_norm_;
  TensorView router_;                        // [E, C]
  std::vector<TensorView> gate_, up_, down_;  // per expert: [I, C], [I, C], [C, I]
  Tensor gate_up_copy_, down_copy_;          // FusedTransposed only: [E, 2I, C], [E, C, I]
};

}  // namespace

std::unique_ptr<Mlp> make_cpu_moe(const WeightSource& w, const MoeSpec& spec) {
  return std::make_unique<CpuMoe>(w, spec);
}

}  // namespace vlm
