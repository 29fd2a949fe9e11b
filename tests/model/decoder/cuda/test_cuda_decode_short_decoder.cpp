// The fused short-context decode (CudaDecoderOptions::decode_short, kernels/cuda/attention/
// decode_short.h: RoPE + K/V write + attention in one launch) against the two-kernel path
// (rope_split_q_kv_write then paged_decode_attention), on a random Qwen2-shaped model with head
// size 128 (the fixture models' head sizes take the reference attention kernel, so they never reach
// it), bf16 and f16, as CUDA graphs and eagerly. Two sequences are prefilled to 700 and 1500 tokens,
// then 6 decode steps of both and 4 of the long one alone, fed the same random tokens; the logits
// agree within the bf16/f16 noise of the graphs-vs-eager test (the split sums' f32 order), and the
// switch took effect (layers counted on the fused path; none with it off); with PDL on (the fused
// kernel launched plainly between PDL kernels) the logits are the same bits. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include <cuda_runtime.h>

#include "model/decoder/cuda/cuda_decoder.h"
#include "tests/model/decoder/cuda/two_sequence_decode_fixture.h"

namespace vlm::testing {
namespace {

class CudaDecodeShortDecoder : public TwoSequenceDecodeFixture {
 protected:
  CudaDecodeShortDecoder() : TwoSequenceDecodeFixture("vlm_decode_short") {}

  std::unique_ptr<CudaDecoder> make(DType dt, bool eager, int short_path, int pdl = 0) const {
    CudaDecoderOptions o = base_options(dt, eager);
    o.decode_short = short_path;
    o.pdl = pdl;
    return std::make_unique<CudaDecoder>(*host_, o);
  }
};

TEST_F(CudaDecodeShortDecoder, FusedShortDecodeAgreesWithTwoKernelPath) {
  int dev = 0, major = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) GTEST_SKIP() << "the fused path needs sm_90 (thread-block clusters)";
  for (DType dt : {DType::BF16, DType::F16}) {
    for (bool eager : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (eager ? " eager" : " graphs"));
      auto fused = make(dt, eager, 1), plain = make(dt, eager, 0), fused_pdl = make(dt, eager, 1, 1);
      const auto got = run({fused.get(), plain.get(), fused_pdl.get()});
      const int64_t rows = 6 * 2 + 4;
      for (const auto& g : got) ASSERT_EQ(static_cast<int64_t>(g.size()), rows * kV);
      EXPECT_LE(max_row_rel_error(got[0].data(), got[1].data(), rows, kV), 2e-2);
      EXPECT_GT(fused->decode_short_layers(), 0) << "the fused path never ran";
      EXPECT_EQ(plain->decode_short_layers(), 0);
      // Inside a PDL step (the fused kernel launched plainly between PDL kernels): the same bits.
      EXPECT_EQ(std::memcmp(got[0].data(), got[2].data(), got[0].size() * sizeof(float)), 0) << "PDL on vs off";
      if (!eager) {
        EXPECT_GT(fused->graph_launches(), 0);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing
