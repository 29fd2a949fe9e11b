// One sequence's paged KV layer with its blocks in shuffled order (an engine after some churn),
// for the attention benchmarks (header-only: every bench/*.cpp is its own executable).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/dtype.h"

namespace vlm::bench {

struct ShuffledCache {
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> table;  // [ceil(len / B)] block ids, shuffled
  std::vector<int32_t> slots;  // [len] slot of each token

  // Room for len tokens of Hkv heads of D values in blocks of B; contents zero (fill with write_kv
  // through `slots`).
  ShuffledCache(int len, int B, int Hkv, int D, DType dtype, std::mt19937& rng) {
    const int nb = (len + B - 1) / B;
    kv = PagedKVLayer{nullptr, nullptr, dtype, nb, B, Hkv, D};
    kbuf.resize(static_cast<size_t>(nb) * kv.block_stride() * dtype_size(dtype));
    vbuf.resize(kbuf.size());
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    table.resize(nb);
    for (int i = 0; i < nb; ++i) table[i] = i;
    std::shuffle(table.begin(), table.end(), rng);
    slots.resize(len);
    for (int j = 0; j < len; ++j) slots[j] = table[j / B] * B + j % B;
  }
};

}  // namespace vlm::bench
