// The GPU vision kernels against their references: varlen bidirectional attention (tensor cores
// vs the naive kernel, the naive f32 kernel vs the CPU's dense_attention_ref per segment, reading
// q/k/v in place from a fused [T, 3, H, D] projection), LayerNorm and the GELUs vs
// kernels/ops/vision_ops, the 2-D rotary vs RotaryEmbedding::apply_cached over the same table,
// and the patch unfold vs its definition. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernels/attention/dense_attention.h"
#include "kernels/cuda/attention/varlen_attention.h"
#include "kernels/cuda/ops/vision_ops_cuda.h"
#include "kernels/ops/rope.h"
#include "kernels/ops/vision_ops.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

// q, k, v of a fused projection [T, 3, H, D] and segment bounds.
struct VarlenCase {
  std::vector<int32_t> cu;
  int H, D;
  std::vector<float> qkv;  // [T, 3 H D]
  int64_t T() const { return cu.back(); }
  int max_len() const {
    int m = 0;
    for (size_t i = 1; i < cu.size(); ++i) m = std::max(m, cu[i] - cu[i - 1]);
    return m;
  }
};

VarlenCase make_case(std::vector<int32_t> lens, int H, int D, uint32_t seed) {
  VarlenCase c{{0}, H, D, {}};
  for (int32_t l : lens) c.cu.push_back(c.cu.back() + l);
  c.qkv = random_vector(static_cast<size_t>(c.T() * 3 * H * D), seed);
  return c;
}

std::vector<float> run_varlen(const VarlenCase& c, DType dt, bool naive) {
  const auto raw = encode(c.qkv, dt);
  cuda::DeviceBuffer qkv(raw.size());
  VLM_CUDA_CHECK(cudaMemcpy(qkv.get(), raw.data(), raw.size(), cudaMemcpyHostToDevice));
  cuda::DeviceBuffer cu = to_device(c.cu);
  const size_t n = static_cast<size_t>(c.T() * c.H * c.D);
  cuda::DeviceBuffer out(n * dtype_size(dt));
  const size_t e = dtype_size(dt), HD = static_cast<size_t>(c.H * c.D);
  const char* b = qkv.as<char>();
  auto fn = naive ? cuda::varlen_attention_naive : cuda::varlen_attention;
  fn(b, b + HD * e, b + 2 * HD * e, 3 * c.H * c.D, dt, c.H, c.D, cu.as<int32_t>(), static_cast<int>(c.cu.size()) - 1,
     c.max_len(), 1.0f / std::sqrt(static_cast<float>(c.D)), out.get(), nullptr);
  return decode(to_host<uint8_t>(out, n * e), dt);
}

TEST(CudaVarlenAttention, TensorCoresMatchNaive) {
  VLM_REQUIRE_GPU();
  for (DType dt : {DType::BF16, DType::F16})
    for (int D : {16, 64, 80, 128})
      for (const auto& lens : {std::vector<int32_t>{1, 37, 64}, {130, 5, 300, 64}, {1024}}) {
        const VarlenCase c = make_case(lens, 3, D, 11 + D);
        const double err = rel_error(run_varlen(c, dt, false), run_varlen(c, dt, true));
        EXPECT_LE(err, dt == DType::BF16 ? 1e-2 : 2e-3) << dtype_name(dt) << " D " << D << " segments " << lens.size();
      }
}

TEST(CudaVarlenAttention, NaiveF32MatchesCpuReference) {
  VLM_REQUIRE_GPU();
  const VarlenCase c = make_case({1, 37, 64, 130}, 2, 80, 5);
  const std::vector<float> gpu = run_varlen(c, DType::F32, true);
  const int HD = c.H * c.D;
  for (size_t s = 0; s + 1 < c.cu.size(); ++s) {
    const int64_t t0 = c.cu[s], L = c.cu[s + 1] - t0;
    std::vector<float> q(L * HD), k(L * HD), v(L * HD), want(L * HD);
    for (int64_t t = 0; t < L; ++t)
      for (int i = 0; i < HD; ++i) {
        q[t * HD + i] = c.qkv[(t0 + t) * 3 * HD + i];
        k[t * HD + i] = c.qkv[(t0 + t) * 3 * HD + HD + i];
        v[t * HD + i] = c.qkv[(t0 + t) * 3 * HD + 2 * HD + i];
      }
    dense_attention_ref(q.data(), k.data(), v.data(), 1, L, c.H, c.D, 1.0f / std::sqrt(80.0f), want.data());
    const std::vector<float> got(gpu.begin() + t0 * HD, gpu.begin() + (t0 + L) * HD);
    EXPECT_LE(rel_error(got, want), 1e-6) << "segment " << s;
  }
}

TEST(CudaVisionOps, LayerNormAndActivationsMatchCpu) {
  VLM_REQUIRE_GPU();
  // 1280 / 1152: the warp-per-row form (7 rows: a partial block); 1030 (not a multiple of 4) and
  // 2048 (beyond its registers): the block-per-row form.
  for (const int64_t C : {int64_t{1280}, int64_t{1152}, int64_t{1030}, int64_t{2048}}) {
    const int64_t T = 7;
    const auto x = random_vector(T * C, 1), w = random_vector(C, 2), b = random_vector(C, 3);
    std::vector<float> want(T * C);
    layer_norm(x.data(), TensorView(const_cast<float*>(w.data()), DType::F32, {C}),
               TensorView(const_cast<float*>(b.data()), DType::F32, {C}), 1e-6f, T, want.data());
    auto dx = to_device(x), dw = to_device(w), db = to_device(b);
    cuda::DeviceBuffer out(T * C * 4);
    cuda::layer_norm(dx.as<float>(), dw.as<float>(), db.as<float>(), 1e-6f, T, C, out.get(), DType::F32, nullptr);
    EXPECT_LE(rel_error(to_host<float>(out, T * C), want), 1e-6) << C;
    cuda::DeviceBuffer half(T * C * 2);
    cuda::layer_norm(dx.as<float>(), dw.as<float>(), db.as<float>(), 1e-6f, T, C, half.get(), DType::BF16, nullptr);
    std::vector<uint16_t> raw(T * C);
    cudaMemcpy(raw.data(), half.get(), raw.size() * 2, cudaMemcpyDeviceToHost);
    std::vector<float> got(T * C);
    for (size_t i = 0; i < raw.size(); ++i) got[i] = bf16_to_f32(raw[i]);
    EXPECT_LE(rel_error(got, want), 4e-3) << C;
  }
  const int64_t T = 7, C = 1280;
  const auto x = random_vector(T * C, 1);

  for (auto [act, cpu] : {std::pair{cuda::Activation::QuickGelu, &quick_gelu}, {cuda::Activation::GeluErf, &gelu_erf},
                          {cuda::Activation::GeluTanh, &gelu_tanh}}) {
    std::vector<float> y = x;
    cpu(y.data(), T * C);
    auto d = to_device(x);
    cuda::activation(d.get(), DType::F32, T * C, act, nullptr);
    EXPECT_LE(rel_error(to_host<float>(d, T * C), y), 1e-6) << static_cast<int>(act);
  }
}

TEST(CudaVisionOps, RotaryMatchesApplyCached) {
  VLM_REQUIRE_GPU();
  // D 80: 4 pairs a thread (Qwen2-VL's head size); 84: 2 (half 42).
  for (const int64_t D : {int64_t{80}, int64_t{84}}) {
    SCOPED_TRACE(D);
    const int64_t T = 9, H = 3;
    std::vector<int32_t> pos(2 * T);
    for (int64_t t = 0; t < T; ++t) pos[2 * t] = static_cast<int32_t>(t / 3), pos[2 * t + 1] = static_cast<int32_t>(t % 3 + 5);
    RopeConfig half;
    half.head_dim = half.rotary_dim = D / 2;
    const std::vector<float> inv_freq = RotaryEmbedding(half).inv_freq();
    std::vector<float> table(T * D);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D / 2; ++i) {
        const float angle = static_cast<float>(pos[2 * t + (i < D / 4 ? 0 : 1)]) * inv_freq[i % (D / 4)];
        table[t * D + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        table[t * D + D / 2 + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
    auto dpos = to_device(pos), dinv = to_device(inv_freq);
    cuda::DeviceBuffer dtable(T * D * 4);
    cuda::vision_rope_table(dpos.as<int32_t>(), dinv.as<float>(), T, D, dtable.as<float>(), nullptr);
    EXPECT_EQ(to_host<float>(dtable, T * D), table);

    const auto qkv = random_vector(T * 3 * H * D, 4);
    std::vector<float> q(T * H * D), k(T * H * D);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H * D; ++i) q[t * H * D + i] = qkv[t * 3 * H * D + i], k[t * H * D + i] = qkv[t * 3 * H * D + H * D + i];
    RopeConfig full;
    full.head_dim = full.rotary_dim = static_cast<int>(D);
    RotaryEmbedding(full).apply_cached(q.data(), H, k.data(), H, table.data(), T);
    auto d = to_device(qkv);
    cuda::vision_rope_qk(d.get(), DType::F32, T, H, D, dtable.as<float>(), nullptr);
    const auto got = to_host<float>(d, T * 3 * H * D);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H * D; ++i) {
        ASSERT_EQ(got[t * 3 * H * D + i], q[t * H * D + i]) << t << " " << i;
        ASSERT_EQ(got[t * 3 * H * D + H * D + i], k[t * H * D + i]) << t << " " << i;
        ASSERT_EQ(got[t * 3 * H * D + 2 * H * D + i], qkv[t * 3 * H * D + 2 * H * D + i]);
      }
  }
}

TEST(CudaVisionOps, UnfoldMatchesConvLayout) {
  VLM_REQUIRE_GPU();
  const int64_t N = 2, S = 28, p = 14, G = S / p, K = 3 * p * p;
  const auto px = random_vector(N * 3 * S * S, 6);
  auto d = to_device(px);
  cuda::DeviceBuffer out(N * G * G * K * 4);
  cuda::unfold_patches(d.as<float>(), N, S, p, out.get(), DType::F32, nullptr);
  const auto got = to_host<float>(out, N * G * G * K);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gy = 0; gy < G; ++gy)
      for (int64_t gx = 0; gx < G; ++gx)
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t ky = 0; ky < p; ++ky)
            for (int64_t kx = 0; kx < p; ++kx)
              ASSERT_EQ(got[((n * G + gy) * G + gx) * K + (ch * p + ky) * p + kx],
                        px[((n * 3 + ch) * S + gy * p + ky) * S + gx * p + kx]);
}

}  // namespace
}  // namespace vlm::testing
