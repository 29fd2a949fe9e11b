// The CPU mixture-of-experts block (CpuLayers::moe, model/layers/cpu/cpu_moe.h) against a naive
// double-precision restatement of transformers 5.17's Qwen3MoeSparseMoeBlock (router logits,
// softmax over all experts, top-k with ties to the lower index, optional renormalisation, each
// chosen expert's down(silu(gate h) * up h) times its weight, summed), one token at a time, one
// expert at a time. Token counts 1 .. 67 (decode to prefill, experts with no tokens, experts
// with many), top-k = 1, 2 and E, the three checkpoint layouts (equal bit for bit), f32 and bf16
// weights, with and without the pre-norm, Write and the residual Add into x itself, exact ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "kernels/core/check.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm::testing {
namespace {

constexpr int64_t C = 24, I = 20, E = 8;
constexpr float kEps = 1e-6f;

// Raw tensors by name (f32 or bf16 bytes), served by a WeightSource.
struct Store {
  struct Entry {
    std::vector<char> bytes;
    DType dtype;
    Shape shape;
  };
  std::map<std::string, Entry> t;
  void put(const std::string& n, const std::vector<float>& v, Shape s, DType dt) {
    Entry e{{}, dt, s};
    if (dt == DType::F32) {
      e.bytes.resize(v.size() * 4);
      std::memcpy(e.bytes.data(), v.data(), e.bytes.size());
    } else {
      e.bytes.resize(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = f32_to_bf16(v[i]);
        std::memcpy(e.bytes.data() + 2 * i, &h, 2);
      }
    }
    t[n] = std::move(e);
  }
  WeightSource source() {
    return WeightSource(
        [this](const std::string& n, const Shape& s) {
          auto it = t.find(n.substr(std::string("layers.1.").size()));  // names are stored without the prefix
          if (it == t.end()) throw LoadError("no tensor " + n);
          if (!(it->second.shape == s)) throw LoadError("shape of " + n);
          return TensorView(it->second.bytes.data(), it->second.dtype, s);
        },
        "layers.1.");
  }
};

// The block's weights as floats (already rounded to the stored dtype).
struct Moe {
  std::vector<float> router, norm;                 // [E, C], [C]
  std::vector<std::vector<float>> gate, up, down;  // per expert [I, C], [I, C], [C, I]
};

float round_to(float v, DType dt) { return dt == DType::F32 ? v : bf16_to_f32(f32_to_bf16(v)); }

Moe random_moe(uint32_t seed, DType dt) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto fill = [&](int64_t n, float scale, float offset = 0.f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_to(offset + scale * nd(rng), dt);
    return v;
  };
  Moe m;
  m.router = fill(E * C, 0.4f);
  m.norm = fill(C, 0.2f, 1.f);
  for (int64_t e = 0; e < E; ++e) {
    m.gate.push_back(fill(I * C, 0.3f));
    m.up.push_back(fill(I * C, 0.3f));
    m.down.push_back(fill(C * I, 0.3f));
  }
  return m;
}

// The experts written in `layout` under "mlp.experts.", the router as "mlp.gate.weight".
Store store_of(const Moe& m, ExpertLayout layout, DType dt) {
  Store s;
  s.put("mlp.gate.weight", m.router, Shape{E, C}, dt);
  s.put("post_attention_layernorm.weight", m.norm, Shape{C}, DType::F32);
  const std::string p = "mlp.experts.";
  if (layout == ExpertLayout::PerExpert) {
    for (int64_t e = 0; e < E; ++e) {
      const std::string n = p + std::to_string(e) + ".";
      s.put(n + "gate_proj.weight", m.gate[e], Shape{I, C}, dt);
      s.put(n + "up_proj.weight", m.up[e], Shape{I, C}, dt);
      s.put(n + "down_proj.weight", m.down[e], Shape{C, I}, dt);
    }
    return s;
  }
  const bool tr = layout == ExpertLayout::FusedTransposed;
  std::vector<float> gu(static_cast<size_t>(E * 2 * I * C)), dn(static_cast<size_t>(E * C * I));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < 2 * I; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const float v = i < I ? m.gate[e][i * C + c] : m.up[e][(i - I) * C + c];
        gu[static_cast<size_t>(tr ? (e * C + c) * 2 * I + i : (e * 2 * I + i) * C + c)] = v;
      }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < I; ++i)
        dn[static_cast<size_t>(tr ? (e * I + i) * C + c : (e * C + c) * I + i)] = m.down[e][c * I + i];
  s.put(p + "gate_up_proj", gu, tr ? Shape{E, C, 2 * I} : Shape{E, 2 * I, C}, dt);
  s.put(p + "down_proj", dn, tr ? Shape{E, I, C} : Shape{E, C, I}, dt);
  return s;
}

// The block's output for each row of x [T, C], in double (pre_norm: RMSNorm with m.norm first).
std::vector<double> naive_moe(const Moe& m, const std::vector<float>& x, int64_t T, int64_t k, bool norm_topk,
                              bool pre_norm) {
  std::vector<double> y(static_cast<size_t>(T * C), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> h(x.begin() + t * C, x.begin() + (t + 1) * C);
    if (pre_norm) {
      double ss = 0;
      for (double v : h) ss += v * v;
      const double inv = 1.0 / std::sqrt(ss / C + kEps);
      for (int64_t c = 0; c < C; ++c) h[c] = h[c] * inv * m.norm[c];
    }
    std::vector<double> p(E);
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += m.router[e * C + c] * h[c];
      p[e] = d;
      mx = std::max(mx, d);
    }
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
    std::vector<bool> taken(E, false);
    std::vector<int64_t> top;
    for (int64_t j = 0; j < k; ++j) {  // the largest left, the lower index on a tie
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
      taken[best] = true;
      top.push_back(best);
    }
    double wsum = 0;
    for (int64_t e : top) wsum += p[e];
    for (int64_t e = 0; e < E; ++e) {
      if (!taken[e]) continue;
      const double w = norm_topk ? p[e] / wsum : p[e];
      std::vector<double> a(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < C; ++c) g += m.gate[e][i * C + c] * h[c], u += m.up[e][i * C + c] * h[c];
        a[i] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < C; ++c) {
        double d = 0;
        for (int64_t i = 0; i < I; ++i) d += m.down[e][c * I + i] * a[i];
        y[t * C + c] += w * d;
      }
    }
  }
  return y;
}

MoeSpec spec_of(int64_t k, bool norm_topk, ExpertLayout layout, bool pre_norm) {
  MoeSpec s;
  s.hidden = C;
  s.inner = I;
  s.num_experts = E;
  s.top_k = k;
  s.norm_topk_prob = norm_topk;
  s.router = {"mlp.gate.weight", {E, C}};
  s.experts = "mlp.experts.";
  s.layout = layout;
  if (pre_norm) s.pre_norm = NormSpec{NormKind::Rms, kEps, {"post_attention_layernorm.weight", {C}}, {}};
  return s;
}

// y = moe(x) (Write), or x += moe(x) in place (Add).
std::vector<float> run(Store& st, const MoeSpec& spec, std::vector<float> x, int64_t T, Accum a) {
  CpuLayers backend;
  auto moe = backend.moe(st.source(), spec);
  ActivationPlan plan;
  plan.bufs.push_back({moe->inner_cols(), ActRole::Hidden, false});
  CpuStep step(plan, T);
  const Act xa{x.data(), T, C, DType::F32};
  if (a == Accum::Add) {
    moe->forward(step, xa, step.act(0), xa, Accum::Add);
    return x;
  }
  std::vector<float> y(static_cast<size_t>(T * C), -7.f);
  moe->forward(step, xa, step.act(0), Act{y.data(), T, C, DType::F32}, Accum::Write);
  return y;
}

double max_rel(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0, worst = 0;
  for (size_t r = 0; r < want.size() / C; ++r) {
    num = den = 0;
    for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
      const double d = got[r * C + c] - want[r * C + c];
      num += d * d;
      den += want[r * C + c] * want[r * C + c];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
  }
  return worst;
}

std::vector<float> random_x(int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(T * C));
  for (float& v : x) v = nd(rng);
  return x;
}

class CpuMoeTest : public ::testing::TestWithParam<std::tuple<int64_t, bool, DType>> {};

TEST_P(CpuMoeTest, EqualsTheNaiveBlockForEveryLayoutAndTokenCount) {
  const int64_t k = std::get<0>(GetParam());
  const bool norm_topk = std::get<1>(GetParam());
  const DType dt = std::get<2>(GetParam());
  const Moe m = random_moe(static_cast<uint32_t>(11 + k), dt);
  for (int64_t T : {1, 2, 5, 17, 67}) {
    const std::vector<float> x = random_x(T, static_cast<uint32_t>(T));
    for (bool pre_norm : {false, true}) {
      const std::vector<double> want = naive_moe(m, x, T, k, norm_topk, pre_norm);
      std::vector<float> first;
      for (ExpertLayout layout : {ExpertLayout::PerExpert, ExpertLayout::Fused, ExpertLayout::FusedTransposed}) {
        Store st = store_of(m, layout, dt);
        const std::vector<float> y = run(st, spec_of(k, norm_topk, layout, pre_norm), x, T, Accum::Write);
        EXPECT_LE(max_rel(y, want), 1e-5) << "T=" << T << " layout " << static_cast<int>(layout) << " pre_norm "
                                          << pre_norm;
        if (first.empty()) first = y;
        else EXPECT_EQ(y, first) << "layouts differ, T=" << T;
      }
      // The residual add into x itself (x and y the same Act, as the decoder calls it).
      Store st = store_of(m, ExpertLayout::Fused, dt);
      const std::vector<float> added = run(st, spec_of(k, norm_topk, ExpertLayout::Fused, pre_norm), x, T, Accum::Add);
      std::vector<double> want_added(want);
      for (size_t i = 0; i < want.size(); ++i) want_added[i] += x[i];
      EXPECT_LE(max_rel(added, want_added), 1e-5) << "Add in place, T=" << T;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TopKNormDtype, CpuMoeTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2, E), ::testing::Bool(),
                                            ::testing::Values(DType::F32, DType::BF16)));

// Experts 2 and 5 (and 3 and 6) have the same router row: their probabilities are equal for every
// token, so top-k meets exact ties; the lower index must win (torch.topk's order on the CPU is not
// a contract, so this is ours, and the naive block states it the same way).
TEST(CpuMoe, ExactTiesGoToTheLowerExpert) {
  Moe m = random_moe(5, DType::F32);
  for (int64_t c = 0; c < C; ++c) {
    m.router[5 * C + c] = m.router[2 * C + c] = 3.f * m.router[2 * C + c];  // 2 and 5 likely in the top 2
    m.router[6 * C + c] = m.router[3 * C + c];
  }
  const int64_t T = 9;
  const std::vector<float> x = random_x(T, 3);
  for (int64_t k : {1, 2, 3}) {
    Store st = store_of(m, ExpertLayout::PerExpert, DType::F32);
    const std::vector<float> y = run(st, spec_of(k, true, ExpertLayout::PerExpert, false), x, T, Accum::Write);
    EXPECT_LE(max_rel(y, naive_moe(m, x, T, k, true, false)), 1e-5) << "k=" << k;
  }
  // With k = 1 and the tied pair on top, expert 5's weights never matter: change them, same bits.
  Store st = store_of(m, ExpertLayout::PerExpert, DType::F32);
  const std::vector<float> before = run(st, spec_of(1, false, ExpertLayout::PerExpert, false), x, T, Accum::Write);
  Moe m5 = m;
  for (float& v : m5.down[5]) v += 1.f;
  Store st5 = store_of(m5, ExpertLayout::PerExpert, DType::F32);
  const std::vector<float> after = run(st5, spec_of(1, false, ExpertLayout::PerExpert, false), x, T, Accum::Write);
  std::vector<double> want = naive_moe(m, x, T, 1, false, false);
  EXPECT_LE(max_rel(before, want), 1e-5);
  bool tied_on_top = false;  // at least one token must have chosen expert 2 (else the test says nothing)
  for (int64_t t = 0; t < T && !tied_on_top; ++t) {
    // The router probabilities of token t, in double: 2 and 5 tied and largest?
    double p2 = 0, best_other = -1e300;
    for (int64_t e = 0; e < E; ++e) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += static_cast<double>(m.router[e * C + c]) * x[t * C + c];
      if (e == 2) p2 = d;
      else if (e != 5) best_other = std::max(best_other, d);
    }
    tied_on_top = p2 > best_other;
  }
  EXPECT_TRUE(tied_on_top) << "no token had the tied pair on top; pick another seed";
  EXPECT_EQ(before, after);
}

TEST(CpuMoe, MissingOrMisshapenExpertsAreRefusedNamingTheTensor) {
  const Moe m = random_moe(1, DType::F32);
  Store st = store_of(m, ExpertLayout::Fused, DType::F32);
  CpuLayers backend;
  try {
    backend.moe(st.source(), spec_of(2, true, ExpertLayout::FusedTransposed, false));
    FAIL() << "a [E, 2I, C] gate_up_proj read as [E, C, 2I]";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.mlp.experts.gate_up_proj"), std::string::npos) << e.what();
  }
  try {
    backend.moe(st.source(), spec_of(2, true, ExpertLayout::PerExpert, false));
    FAIL() << "per-expert tensors that are not there";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.mlp.experts.0.gate_proj.weight"), std::string::npos) << e.what();
  }
}

// A backend that does not implement the block (LayerBackend's default, which CudaLayers keeps
// until the GPU has one) refuses it at load, naming it and the router's tensor.
TEST(CpuMoe, ABackendWithoutMoeRefusesItByName) {
  struct NoMoe final : LayerBackend {
    [[noreturn]] static void no() { throw InternalError("not used"); }
    std::unique_ptr<Embedding> embedding(const WeightSource&, const WeightRef&) override { no(); }
    std::unique_ptr<Norm> norm(const WeightSource&, const NormSpec&) override { no(); }
    std::unique_ptr<Linear> linear(const WeightSource&, const std::vector<LinearPart>&, const NormSpec*) override { no(); }
    std::unique_ptr<Linear> tied_linear(const Embedding&, const WeightSource&, const NormSpec*) override { no(); }
    std::unique_ptr<RopeTable> rope_table(const RopeConfig&) override { no(); }
    std::unique_ptr<CausalAttention> causal_attention(const WeightSource&, const AttentionSpec&, const RopeTable&) override {
      no();
    }
    std::unique_ptr<Mlp> mlp(const WeightSource&, const MlpSpec&) override { no(); }
    std::unique_ptr<SegmentAttention> segment_attention(const SegmentAttentionSpec&) override { no(); }
    std::unique_ptr<VisionRopeTable> vision_rope_table(const VisionRopeSpec&) override { no(); }
    std::unique_ptr<PatchEmbedding> patch_embedding(const WeightSource&, const PatchEmbeddingSpec&) override { no(); }
    std::unique_ptr<RowOps> row_ops() override { no(); }
    std::unique_ptr<LearnedRows> learned_rows(const WeightSource&, const WeightRef&) override { no(); }
  } backend;
  Store st = store_of(random_moe(1, DType::F32), ExpertLayout::Fused, DType::F32);
  try {
    backend.moe(st.source(), spec_of(2, true, ExpertLayout::Fused, false));
    FAIL() << "refused nothing";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("does not implement mixture-of-experts blocks (Moe, 8 experts, top 2, router "
                                         "layers.1.mlp.gate.weight)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace vlm::testing
