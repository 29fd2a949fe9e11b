// The CPU attention layer's per-head q/k RMSNorm (AttentionSpec::q_norm / k_norm, Qwen3): the
// layer with the norm on a fused q|k|v gives what the layer without it gives on q and k already
// normalized by a naive double loop (per row, per head, over D, times the weight), so the norm
// runs per head, with its own weights for q and k, and before RoPE (a rotation does not commute
// with a non-uniform weight). Also: the norm changes the result, and a backend that does not
// implement it refuses the spec at load.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/scheduling/kv_cache.h"
#include "kernels/core/check.h"
#include "model/decoder/forward_batch.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm::testing {
namespace {

constexpr int64_t H = 4, Hkv = 2, D = 24, T = 11;
constexpr float kEps = 1e-6f;

struct Weights {
  std::map<std::string, std::vector<float>> data;
  WeightSource source() {
    return WeightSource(
        [this](const std::string& n, const Shape& s) {
          auto it = data.find(n);
          if (it == data.end()) throw LoadError("no tensor " + n);
          if (static_cast<int64_t>(it->second.size()) != s.numel()) throw LoadError("shape of " + n);
          return TensorView(it->second.data(), DType::F32, s);
        },
        "layers.0.self_attn.");
  }
};

// y = x / sqrt(mean(x^2) + eps) * w over each of `rows` rows of D, in double.
void naive_head_norm(float* x, int64_t rows, const std::vector<float>& w) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * D;
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(v[d]) * v[d];
    const double inv = 1.0 / std::sqrt(ss / D + kEps);
    for (int64_t d = 0; d < D; ++d) v[d] = static_cast<float>(v[d] * inv * w[static_cast<size_t>(d)]);
  }
}

// Runs one attention layer over T prompt tokens (one sequence, fresh cache), qkv as planes
// [T, H*D], [T, Hkv*D], [T, Hkv*D]. Returns the output [T, H*D].
std::vector<float> run(Weights& w, const AttentionSpec& spec, std::vector<float> qkv) {
  CpuLayers backend;
  RopeConfig rc;
  rc.head_dim = rc.rotary_dim = static_cast<int>(D);
  rc.theta = 10000.0;
  auto rope = backend.rope_table(rc);
  auto attn = backend.causal_attention(w.source(), spec, *rope);
  KVCacheShape shape;
  shape.num_layers = 1;
  shape.num_blocks = 2;
  shape.block_size = 16;
  shape.num_kv_heads = static_cast<int>(Hkv);
  shape.head_dim = static_cast<int>(D);
  shape.dtype = DType::F32;
  KVCache cache(shape);
  std::vector<int32_t> ids(T, 5), blocks{1};
  SequenceChunk c;
  c.token_ids = ids;
  c.block_table = blocks;
  c.logits = LogitsFor::All;
  const ForwardBatch fb = make_forward_batch(std::span<const SequenceChunk>(&c, 1), 16);
  const ActivationPlan plan;
  const EmbeddingOverride none;
  std::vector<float> logits;
  CpuStep step(plan, fb, cache.layers(), none, logits);
  const RopeRows rows = rope->build(step);
  const Act out = attn->forward(step, Act{qkv.data(), T, (H + 2 * Hkv) * D, DType::F32}, rows);
  return std::vector<float>(out.f32(), out.f32() + T * H * D);
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

TEST(CpuQkNorm, EqualsTheUnnormedLayerOnNaivelyNormedHeads) {
  std::mt19937 rng(40);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Weights w;
  auto& qw = w.data["layers.0.self_attn.q_norm.weight"];
  auto& kw = w.data["layers.0.self_attn.k_norm.weight"];
  for (int64_t d = 0; d < D; ++d) qw.push_back(1.0f + 0.5f * n(rng)), kw.push_back(1.0f + 0.5f * n(rng));
  std::vector<float> qkv(static_cast<size_t>(T * (H + 2 * Hkv) * D));
  for (float& x : qkv) x = 2.0f * n(rng) + 0.3f;  // an offset: the norm's scale matters

  const AttentionSpec plain{0, H, Hkv, D, 1.0f / std::sqrt(static_cast<float>(D)), {}, {}};
  AttentionSpec normed = plain;  // names under the source's prefix "layers.0.self_attn."
  normed.q_norm = NormSpec{NormKind::Rms, kEps, {"q_norm.weight", {D}}, {}};
  normed.k_norm = NormSpec{NormKind::Rms, kEps, {"k_norm.weight", {D}}, {}};

  std::vector<float> pre = qkv;
  naive_head_norm(pre.data(), T * H, qw);                  // q plane: rows [T*H, D]
  naive_head_norm(pre.data() + T * H * D, T * Hkv, kw);    // k plane: rows [T*Hkv, D]

  const std::vector<float> got = run(w, normed, qkv);
  const std::vector<float> want = run(w, plain, pre);
  EXPECT_LE(max_rel(got, want), 1e-5);
  const std::vector<float> unnormed = run(w, plain, qkv);
  EXPECT_GT(max_rel(unnormed, want), 1e-2) << "the norm must change the attention";

  // (A norm after RoPE would fail the first check: the weights are not uniform over D.)
  // q's weights on k and k's on q give another answer: each has its own.
  std::vector<float> swapped = qkv;
  naive_head_norm(swapped.data(), T * H, kw);
  naive_head_norm(swapped.data() + T * H * D, T * Hkv, qw);
  EXPECT_GT(max_rel(run(w, plain, swapped), got), 1e-3) << "q and k need their own weights";
}

TEST(CpuQkNorm, MissingWeightIsALoadErrorNamingIt) {
  Weights w;  // none
  CpuLayers backend;
  RopeConfig rc;
  rc.head_dim = rc.rotary_dim = static_cast<int>(D);
  auto rope = backend.rope_table(rc);
  AttentionSpec s{0, H, Hkv, D, 1.0f, {}, {}};
  s.q_norm = NormSpec{NormKind::Rms, kEps, {"q_norm.weight", {D}}, {}};
  s.k_norm = NormSpec{NormKind::Rms, kEps, {"k_norm.weight", {D}}, {}};
  try {
    backend.causal_attention(w.source(), s, *rope);
    FAIL() << "no LoadError";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.self_attn.q_norm.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vlm::testing
