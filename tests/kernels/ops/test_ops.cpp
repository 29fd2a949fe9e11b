// kernels/ops/ops.h against kernels/ops/ops_ref.h over tables of shapes and weight dtypes, every ISA's row
// kernels against the scalar ones, the vectorized exp's accuracy, and a few hand-checked values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/ops_ref.h"
#include "kernels/ops/row_kernels.h"
#include "kernels/core/tensor.h"

namespace vlm {
namespace {

const int64_t kCs[] = {1, 3, 17, 64, 100, 4096};
const int64_t kTs[] = {1, 2, 5, 33};
const DType kWeightDtypes[] = {DType::F32, DType::BF16, DType::F16};

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// A 1-D or 2-D tensor of dtype t holding `values` (rounded to t).
Tensor make_tensor(const std::vector<float>& values, DType t, Shape shape) {
  Tensor out = Tensor::empty(shape, t);
  convert_from_f32(values.data(), t, out.data(), out.numel());
  return out;
}

// |got - want| <= atol + rtol * |want| for every element; reports the first few failures.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double g = got[i], w = want[i];
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << what << " at " << i << ": got " << g << " want " << w;
      ++failures;
    }
  }
}

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
}

std::vector<const RowKernels*> available_row_kernels() {
  std::vector<const RowKernels*> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (const RowKernels* k = row_kernels_for(isa)) out.push_back(k);
  return out;
}

TEST(RowKernels, ExpRelativeErrorBelow1e6) {
  // Dense sweep over the range where e^x is a normal f32, plus the edges.
  std::vector<float> x;
  for (double v = -87.0; v <= 88.5; v += 1.3e-4) x.push_back(static_cast<float>(v));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 0.34657359f, -0.34657359f, 88.7f})
    x.push_back(v);
  for (const RowKernels* k : available_row_kernels()) {
    std::vector<float> y(x.size());
    k->exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(y[i] - want) / want);
    }
    // Required: <= 1e-6 (logits match HF to 1e-4). Measured: ~8e-8 (1.3 ulp) on AVX2/AVX-512.
    EXPECT_LT(worst, 2e-7) << k->name;
    EXPECT_EQ(y[x.size() - 9], 1.0f) << k->name << ": exp(0)";
  }
}

TEST(RowKernels, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, inf, 89.0f, 1000.0f, -110.0f, -1000.0f, std::nanf("")};
  for (const RowKernels* k : available_row_kernels()) {
    std::vector<float> y(x.size());
    k->exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 0.0f) << k->name;
    EXPECT_EQ(y[1], inf) << k->name;
    EXPECT_EQ(y[2], inf) << k->name;
    EXPECT_EQ(y[3], inf) << k->name;
    EXPECT_EQ(y[4], 0.0f) << k->name;
    EXPECT_EQ(y[5], 0.0f) << k->name;
    EXPECT_TRUE(std::isnan(y[6])) << k->name;
  }
}

TEST(RowKernels, EveryIsaMatchesScalar) {
  const RowKernels& ref = kRowKernelsScalar;
  for (const RowKernels* k : available_row_kernels()) {
    for (int64_t n : {0, 1, 3, 7, 8, 9, 15, 16, 17, 33, 100, 4096}) {
      const std::string what = std::string(k->name) + " n=" + std::to_string(n);
      const std::vector<float> x = randn(n, 1 + n, 2.0f), w = randn(n, 2 + n), u = randn(n, 3 + n);

      const double ss = k->sum_squares(x.data(), n), ss_ref = ref.sum_squares(x.data(), n);
      EXPECT_NEAR(ss, ss_ref, 1e-12 * ss_ref) << what;

      std::vector<float> y(n), y_ref(n);
      k->scale_mul(x.data(), 0.37f, w.data(), y.data(), n);
      ref.scale_mul(x.data(), 0.37f, w.data(), y_ref.data(), n);
      expect_bitwise(y, y_ref, "scale_mul " + what);

      k->silu_mul(x.data(), u.data(), y.data(), n);
      ref.silu_mul(x.data(), u.data(), y_ref.data(), n);
      expect_close(y, y_ref, 1e-6, 1e-30, "silu_mul " + what);

      y = x, y_ref = x;
      k->softmax(y.data(), n);
      ref.softmax(y_ref.data(), n);
      expect_close(y, y_ref, 1e-6, 1e-30, "softmax " + what);

      y = x, y_ref = x;
      k->add(y.data(), w.data(), n);
      ref.add(y_ref.data(), w.data(), n);
      expect_bitwise(y, y_ref, "add " + what);

      // block_max: exact on every ISA (block sizes below, at and above a vector, and ragged).
      for (int64_t block : {1, 5, 16, 64, 1024}) {
        std::vector<float> bm((n + block - 1) / block), bm_ref(bm.size());
        k->block_max(x.data(), n, block, bm.data());
        ref.block_max(x.data(), n, block, bm_ref.data());
        expect_bitwise(bm, bm_ref, "block_max block=" + std::to_string(block) + " " + what);
      }

      // exp_sum: the terms within 1e-6 of the scalar ones, the sum too; y null sums only.
      const float xmax = n ? *std::max_element(x.begin(), x.end()) : 0.0f;
      for (float sc : {1.0f, 0.37f, 3.0f}) {
        const float m = xmax * sc;
        const double es = k->exp_sum(x.data(), n, sc, m, y.data());
        const double es_ref = ref.exp_sum(x.data(), n, sc, m, y_ref.data());
        expect_close(y, y_ref, 1e-6, 1e-30, "exp_sum terms " + what);
        EXPECT_NEAR(es, es_ref, 1e-6 * es_ref + 1e-300) << "exp_sum " << what;
        EXPECT_NEAR(k->exp_sum(x.data(), n, sc, m, nullptr), es, 1e-12 * es + 1e-300) << "exp_sum, no y " << what;
      }

      // rotate_half over [2n] with n frequencies: identical bits on every ISA.
      std::vector<float> r = randn(2 * n, 4 + n), r_ref = r;
      const std::vector<float> c = randn(n, 5 + n), s = randn(n, 6 + n);
      k->rotate_half(r.data(), c.data(), s.data(), n);
      ref.rotate_half(r_ref.data(), c.data(), s.data(), n);
      expect_bitwise(r, r_ref, "rotate_half " + what);
    }
  }
}

TEST(RowKernels, BlockMaxAndExpSumWithMaskedEntries) {
  // -inf entries (masked logits) take part in a max as -inf and add 0 to a sum; a block of
  // only -inf has max -inf.
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> x(40, ninf);
  x[3] = 1.5f, x[17] = -2.0f, x[39] = 0.25f;
  for (const RowKernels* k : available_row_kernels()) {
    std::vector<float> bm(4);
    k->block_max(x.data(), 40, 10, bm.data());
    EXPECT_EQ(bm, (std::vector<float>{1.5f, -2.0f, ninf, 0.25f})) << k->name;
    std::vector<float> y(40, 7.0f);
    const double s = k->exp_sum(x.data(), 40, 2.0f, 3.0f, y.data());  // e^(2x - 3)
    const double want = 1.0 + std::exp(-7.0) + std::exp(-2.5);
    EXPECT_NEAR(s, want, 1e-6 * want) << k->name;
    EXPECT_EQ(y[0], 0.0f) << k->name;
    EXPECT_EQ(y[3], 1.0f) << k->name;
    EXPECT_NEAR(y[39], std::exp(-2.5), 1e-6 * std::exp(-2.5)) << k->name;
  }
}

TEST(Ops, RmsNormMatchesRef) {
  for (DType wt : kWeightDtypes) {
    for (int64_t C : kCs) {
      for (int64_t T : kTs) {
        const std::string what =
            std::string(dtype_name(wt)) + " T=" + std::to_string(T) + " C=" + std::to_string(C);
        const std::vector<float> x = randn(T * C, 10 + T * C, 3.0f, 0.5f);
        Tensor w = make_tensor(randn(C, 20 + C, 0.2f, 1.0f), wt, {C});
        std::vector<float> y(x.size()), y_ref(x.size());
        rms_norm(x.data(), w.view(), 1e-6f, T, y.data());
        rms_norm_ref(x.data(), w.view(), 1e-6f, T, y_ref.data());
        expect_close(y, y_ref, 1e-6, 1e-30, "rms_norm " + what);
        // In place (y aliases x) gives the same bits.
        std::vector<float> inplace = x;
        rms_norm(inplace.data(), w.view(), 1e-6f, T, inplace.data());
        expect_bitwise(inplace, y, "rms_norm in place " + what);
      }
    }
  }
}

TEST(Ops, RmsNormHandValues) {
  // A constant row a: mean(x^2) = a^2, so y = w * a / sqrt(a^2 + eps).
  const int64_t C = 5;
  const float a = 0.25f, eps = 1e-2f;
  Tensor w = make_tensor({1.0f, 2.0f, -1.0f, 0.5f, 0.0f}, DType::F32, {C});
  std::vector<float> x(C, a), y(C);
  rms_norm(x.data(), w.view(), eps, 1, y.data());
  const double n = a / std::sqrt(a * a + eps);  // 0.928476...
  const double wv[] = {1.0, 2.0, -1.0, 0.5, 0.0};
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(y[c], wv[c] * n, 1e-6) << c;
  // A zero row stays zero (eps keeps the division finite).
  std::vector<float> z(C, 0.0f);
  rms_norm(z.data(), w.view(), eps, 1, z.data());
  for (float v : z) EXPECT_EQ(v, 0.0f);
}

TEST(Ops, SiluMulMatchesRef) {
  for (int64_t I : kCs) {
    for (int64_t T : kTs) {
      const std::string what = "T=" + std::to_string(T) + " I=" + std::to_string(I);
      const std::vector<float> g = randn(T * I, 30 + T * I, 4.0f), u = randn(T * I, 40 + T * I);
      std::vector<float> out(g.size()), out_ref(g.size());
      silu_mul(g.data(), u.data(), T, I, out.data());
      silu_mul_ref(g.data(), u.data(), T, I, out_ref.data());
      expect_close(out, out_ref, 1e-6, 1e-30, "silu_mul " + what);
      std::vector<float> inplace = g;  // out aliases gate
      silu_mul(inplace.data(), u.data(), T, I, inplace.data());
      expect_bitwise(inplace, out, "silu_mul in place " + what);
    }
  }
}

TEST(Ops, SiluHandValues) {
  const std::vector<float> g = {0.0f, 1.0f, -1.0f, 20.0f, -30.0f};
  const std::vector<float> u = {3.0f, 1.0f, 2.0f, 1.0f, 1.0f};
  std::vector<float> out(g.size());
  silu_mul(g.data(), u.data(), 1, static_cast<int64_t>(g.size()), out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.7310585786300049, 1e-7);       // 1 / (1 + e^-1)
  EXPECT_NEAR(out[2], 2 * -0.2689414213699951, 1e-7);  // -1 / (1 + e)
  EXPECT_NEAR(out[3], 20.0, 1e-5);
  EXPECT_NEAR(out[4], -30.0 / (1.0 + std::exp(30.0)), 1e-18);
}

TEST(Ops, SoftmaxRowsMatchesRef) {
  for (int64_t n : kCs) {
    for (int64_t rows : kTs) {
      const std::string what = "rows=" + std::to_string(rows) + " n=" + std::to_string(n);
      const std::vector<float> in = randn(rows * n, 50 + rows * n, 5.0f);
      std::vector<float> x = in, x_ref = in;
      softmax_rows(x.data(), rows, n);
      softmax_rows_ref(x_ref.data(), rows, n);
      // The f32 x - max (as PyTorch computes it) is off by up to 2^-24 |x - max|, which e^(.)
      // turns into that much relative error; the reference subtracts in double.
      for (int64_t r = 0; r < rows; ++r) {
        float m = in[r * n];
        for (int64_t i = 0; i < n; ++i) m = std::max(m, in[r * n + i]);
        for (int64_t i = 0; i < n; ++i) {
          const size_t j = static_cast<size_t>(r * n + i);
          const double tol = (6e-7 + 6e-8 * std::fabs(in[j] - m)) * x_ref[j];
          ASSERT_NEAR(x[j], x_ref[j], tol) << "softmax " << what << " at " << j;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += x[r * n + i];
        EXPECT_NEAR(sum, 1.0, 1e-5) << what << " row " << r;
      }
    }
  }
}

TEST(Ops, SoftmaxMaskedAndLargeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  // -inf entries get exactly 0; large logits do not overflow (max is subtracted).
  std::vector<float> x = {1000.0f, -inf, 999.0f, -inf, 1000.0f, -inf, -inf, -inf, -inf, -inf,
                          -inf,    -inf, -inf,   -inf, -inf,    -inf, -inf, 998.0f};
  softmax_rows(x.data(), 1, static_cast<int64_t>(x.size()));
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), z = 2.0 + e1 + e2;
  EXPECT_NEAR(x[0], 1.0 / z, 1e-7);
  EXPECT_NEAR(x[2], e1 / z, 1e-7);
  EXPECT_NEAR(x[4], 1.0 / z, 1e-7);
  EXPECT_NEAR(x[17], e2 / z, 1e-7);
  for (int i : {1, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) EXPECT_EQ(x[i], 0.0f) << i;
}

TEST(Ops, AddInplaceMatchesRef) {
  for (int64_t n : {0, 1, 3, 17, 64, 100, 4096, 33 * 4096, 300001}) {
    const std::vector<float> x = randn(n, 60 + n);
    std::vector<float> y = randn(n, 70 + n), y_ref = y;
    add_inplace(y.data(), x.data(), n);
    add_inplace_ref(y_ref.data(), x.data(), n);
    expect_bitwise(y, y_ref, "add_inplace n=" + std::to_string(n));
  }
}

TEST(Ops, EmbeddingLookupMatchesRef) {
  const int64_t V = 37;
  for (DType t : kWeightDtypes) {
    for (int64_t C : kCs) {
      Tensor table = make_tensor(randn(V * C, 80 + C), t, {V, C});
      for (int64_t T : kTs) {
        std::vector<int32_t> ids(static_cast<size_t>(T));
        for (int64_t i = 0; i < T; ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % V);
        ids[0] = static_cast<int32_t>(V - 1);  // the last row
        std::vector<float> out(T * C), out_ref(T * C);
        embedding_lookup(table.view(), ids.data(), T, out.data());
        embedding_lookup_ref(table.view(), ids.data(), T, out_ref.data());
        const std::string what =
            std::string(dtype_name(t)) + " T=" + std::to_string(T) + " C=" + std::to_string(C);
        expect_bitwise(out, out_ref, "embedding " + what);
        // And against the stored element directly.
        EXPECT_EQ(out[C - 1], load_as_f32(table.data(), t, (V - 1) * C + C - 1)) << what;
      }
    }
  }
}

TEST(Ops, EmbeddingLookupRejectsOutOfRangeIds) {
  const int64_t V = 4, C = 3;
  Tensor table = make_tensor(randn(V * C, 90), DType::F32, {V, C});
  for (int32_t bad : {4, -1, 1 << 30}) {
    const int32_t ids[2] = {1, bad};
    std::vector<float> out(2 * C, 7.0f);
    EXPECT_THROW(embedding_lookup(table.view(), ids, 2, out.data()), InternalError) << bad;
    for (float v : out) EXPECT_EQ(v, 7.0f);  // every id is checked before anything is written
    EXPECT_THROW(embedding_lookup_ref(table.view(), ids, 2, out.data()), InternalError) << bad;
  }
}

TEST(Ops, RowSplitAcrossThreadsMatchesOneRowAtATime) {
  // [33, 4096] is big enough to go through the thread pool; each row must not depend on that.
  const int64_t T = 33, C = 4096;
  const std::vector<float> x = randn(T * C, 100, 2.0f);
  Tensor w = make_tensor(randn(C, 101, 0.1f, 1.0f), DType::BF16, {C});
  std::vector<float> y(T * C), y_rows(T * C), s = x, s_rows = x;
  rms_norm(x.data(), w.view(), 1e-5f, T, y.data());
  softmax_rows(s.data(), T, C);
  for (int64_t t = 0; t < T; ++t) {
    rms_norm(x.data() + t * C, w.view(), 1e-5f, 1, y_rows.data() + t * C);
    softmax_rows(s_rows.data() + t * C, 1, C);
  }
  expect_bitwise(y, y_rows, "rms_norm rows");
  expect_bitwise(s, s_rows, "softmax rows");
}

}  // namespace
}  // namespace vlm
