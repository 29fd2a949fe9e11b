// Shared setup of the MoE decode kernel tests (test_cuda_moe_decode.cpp,
// test_cuda_moe_norm_router.cpp): the routing groups' device buffer and a float vector's bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/moe/moe_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace vlm::testing {

// moe_route_sort's outputs in one device buffer, poisoned (0xff) at construction: offsets,
// tile_starts, active [E+1] each, then pair_of_slot, slot_of_pair [P] each.
struct MoeSortedBuffers {
  cuda::DeviceBuffer meta;
  cuda::MoeSorted s;
  MoeSortedBuffers(int64_t E, int64_t P) : meta((3 * (E + 1) + 2 * P) * 4) {
    VLM_CUDA_CHECK(cudaMemset(meta.get(), 0xff, meta.bytes()));
    s.offsets = meta.as<int32_t>();
    s.tile_starts = s.offsets + E + 1;
    s.active = s.tile_starts + E + 1;
    s.pair_of_slot = s.active + E + 1;
    s.slot_of_pair = s.pair_of_slot + P;
  }
  // The buffer on the host, with `active` past its count (not written by every form) set to -1:
  // the count and the listed experts kept.
  std::vector<int32_t> host(int64_t E, int64_t P) const {
    auto v = to_host<int32_t>(meta, 3 * (E + 1) + 2 * P);
    const int32_t busy = v[3 * (E + 1) - 1];
    for (int64_t i = 2 * (E + 1) + busy; i < 3 * (E + 1) - 1; ++i) v[i] = -1;
    return v;
  }
};

// The bit patterns of v (for bitwise comparisons that NaN does not defeat).
inline std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

}  // namespace vlm::testing
