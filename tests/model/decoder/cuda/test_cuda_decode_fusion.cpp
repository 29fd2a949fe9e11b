// The decode step's fusions (CudaDecoderOptions::fused_norm: each RMSNorm folded into the GEMV
// after it; fused_decode_reduce: decode attention's split reduce merged into its split kernel)
// against the unfused launches, on a random Qwen2-shaped model with head size 128 (the split-K
// decode kernel runs; the fixture models' head sizes take the reference attention kernel), bf16
// and f16, as CUDA graphs and eagerly. Two sequences are prefilled to 700 and 1500 tokens (so the
// decode plan has several splits a KV head: the merged reduce's case), then 6 decode steps of
// both (2 rows: the GEMV path) and 4 of the long one alone (1 row), fed the same random tokens.
// The norm fusion gives the same logits bit for bit (hidden 1024 <= 4096); the merged reduce
// agrees within the bf16/f16 noise of the graphs-vs-eager test (it adds the softmax weights in
// another order). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/model/decoder/cuda/two_sequence_decode_fixture.h"

namespace vlm::testing {
namespace {

class CudaDecodeFusion : public TwoSequenceDecodeFixture {
 protected:
  CudaDecodeFusion() : TwoSequenceDecodeFixture("vlm_decode_fusion") {}

  std::unique_ptr<CudaDecoder> make(DType dt, bool eager, int norm, int reduce) const {
    CudaDecoderOptions o = base_options(dt, eager);
    o.fused_norm = norm;
    o.fused_decode_reduce = reduce;
    o.decode_short = 0;  // the split kernel (the fused short-decode path: test_cuda_decode_short_decoder.cpp)
    return std::make_unique<CudaDecoder>(*host_, o);
  }
};

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST_F(CudaDecodeFusion, NormFusionIsExactAndMergedReduceAgrees) {
  for (DType dt : {DType::BF16, DType::F16}) {
    for (bool eager : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (eager ? " eager" : " graphs"));
      // {norm, reduce} fused: both, norm off, reduce off, neither.
      auto both = make(dt, eager, 1, 1), no_norm = make(dt, eager, 0, 1), no_reduce = make(dt, eager, 1, 0),
           neither = make(dt, eager, 0, 0);
      const auto got = run({both.get(), no_norm.get(), no_reduce.get(), neither.get()});
      const int64_t rows = 6 * 2 + 4;
      for (const auto& g : got) ASSERT_EQ(static_cast<int64_t>(g.size()), rows * kV);
      EXPECT_EQ(differing(got[0], got[1]), 0) << "norm fusion, merged reduce";
      EXPECT_EQ(differing(got[2], got[3]), 0) << "norm fusion, reduce kernel";
      EXPECT_LE(max_row_rel_error(got[0].data(), got[2].data(), rows, kV), 2e-2) << "merged reduce, norm fused";
      EXPECT_LE(max_row_rel_error(got[1].data(), got[3].data(), rows, kV), 2e-2) << "merged reduce, norm unfused";
      if (!eager) {
        EXPECT_GT(both->graph_launches(), 0);
      } else {
        EXPECT_EQ(both->graphs_captured(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing
