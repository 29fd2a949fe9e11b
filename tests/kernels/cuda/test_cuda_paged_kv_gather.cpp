// paged_kv_gather (kernels/cuda/attention/paged_kv_gather.h) against a naive host gather of the
// same cache: a sequence's first n rows read through a shuffled block table (n not a multiple of
// the block size), bf16 / f16 / f32, D 64 / 128 / 80, block sizes 16 and 32; rows past n of the
// output untouched. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention/paged_kv_gather.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

struct GatherCase {
  int n, Hkv, D, B;
  DType dt;
};

TEST(CudaPagedKvGather, EqualsHostGather) {
  VLM_REQUIRE_GPU();
  const GatherCase cases[] = {{77, 2, 128, 16, DType::BF16}, {300, 4, 64, 32, DType::F16}, {33, 3, 80, 16, DType::BF16},
                              {50, 1, 64, 16, DType::F32}};
  uint32_t seed = 1;
  for (const GatherCase& c : cases) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " Hkv " + std::to_string(c.Hkv) + " D " + std::to_string(c.D) + " B " +
                 std::to_string(c.B) + " " + dtype_name(c.dt));
    const int blocks = (c.n + c.B - 1) / c.B, num_blocks = 2 * blocks + 3;
    PagedKVLayer kv;
    kv.dtype = c.dt;
    kv.num_blocks = num_blocks;
    kv.block_size = c.B;
    kv.num_kv_heads = c.Hkv;
    kv.head_dim = c.D;
    const size_t e = dtype_size(c.dt), cache_elems = size_t(num_blocks) * kv.block_stride();
    const auto k_host = encode(random_vector(cache_elems, seed++), c.dt);  // [num_blocks, Hkv, B, D]
    const auto v_host = encode(random_vector(cache_elems, seed++), c.dt);
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(seed++));
    table.resize(size_t(blocks));
    auto dk = to_device(k_host), dv = to_device(v_host), dtable = to_device(table);
    kv.k = dk.get();
    kv.v = dv.get();
    const size_t row = size_t(c.Hkv) * c.D * e, out_bytes = size_t(c.n + 5) * row;  // 5 rows of slack
    std::vector<uint8_t> sentinel(out_bytes, 0x5a);
    auto dko = to_device(sentinel), dvo = to_device(sentinel);
    ASSERT_TRUE(cuda::paged_kv_gather_supported(kv));
    cuda::paged_kv_gather(kv, static_cast<const int32_t*>(dtable.get()), c.n, dko.get(), dvo.get(), nullptr);
    const auto k_got = to_host<uint8_t>(dko, out_bytes), v_got = to_host<uint8_t>(dvo, out_bytes);
    // Naive host gather: token t, head h from block table[t / B], row t % B.
    std::vector<uint8_t> k_ref = sentinel, v_ref = sentinel;
    for (int t = 0; t < c.n; ++t)
      for (int h = 0; h < c.Hkv; ++h) {
        const size_t src = (size_t(table[size_t(t / c.B)]) * kv.block_stride() + size_t(h) * kv.head_stride() +
                            size_t(t % c.B) * c.D) * e;
        const size_t dst = (size_t(t) * c.Hkv + h) * c.D * e;
        std::memcpy(k_ref.data() + dst, k_host.data() + src, size_t(c.D) * e);
        std::memcpy(v_ref.data() + dst, v_host.data() + src, size_t(c.D) * e);
      }
    size_t k_bad = 0, v_bad = 0;
    for (size_t i = 0; i < out_bytes; ++i) {
      k_bad += k_got[i] != k_ref[i];
      v_bad += v_got[i] != v_ref[i];
    }
    EXPECT_EQ(k_bad, 0u) << k_bad << " of " << out_bytes << " K bytes differ";
    EXPECT_EQ(v_bad, 0u) << v_bad << " of " << out_bytes << " V bytes differ";
  }
}

}  // namespace
}  // namespace vlm::testing
