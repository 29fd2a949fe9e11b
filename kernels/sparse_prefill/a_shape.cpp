#include "kernels/sparse_prefill/a_shape.h"

#include <algorithm>

namespace vlm {
namespace {

// Keys of query block m's rows (positions [p0, p1]) under A-shape: [0, n_init) and
// [p0 - n_local + 1, p1], as the key blocks they touch.
void push_a_shape_blocks(HeadPlan& hp, int p0, int p1, int block, int n_init, int n_local) {
  const int last_b = p1 / block;
  const int sink_end_b = n_init > 0 ? (std::min(n_init, p1 + 1) - 1) / block : -1;
  const int local_b = std::max(0, p0 - n_local + 1) / block;
  for (int b = 0; b <= last_b; ++b)
    if (b <= sink_end_b || b >= local_b) hp.blocks.push_back(b * block);
}

}  // namespace

HeadPlan a_shape_head_plan(int q_len, int num_keys, int block, int n_init, int n_local) {
  return tri_shape_head_plan(q_len, num_keys, block, n_init, n_local, 0, num_keys);
}

HeadPlan tri_shape_head_plan(int q_len, int num_keys, int block, int n_init, int n_local,
                             int n_last, int prompt_len) {
  const int off = num_keys - q_len;
  const int nqb = (q_len + block - 1) / block;
  const int dense_from = prompt_len - std::max(0, n_last);  // first position of the dense tail
  HeadPlan hp = empty_head_plan(nqb);
  for (int m = 0; m < nqb; ++m) {
    const int p0 = off + m * block, p1 = off + std::min(q_len, (m + 1) * block) - 1;
    if (n_last > 0 && p1 >= dense_from) {
      for (int b = 0; b <= p1 / block; ++b) hp.blocks.push_back(b * block);
    } else {
      push_a_shape_blocks(hp, p0, p1, block, n_init, n_local);
    }
    hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
  }
  return hp;
}

std::vector<uint8_t> a_shape_token_mask(int q_len, int num_keys, int n_init, int n_local) {
  return tri_shape_token_mask(q_len, num_keys, n_init, n_local, 0, num_keys);
}

std::vector<uint8_t> tri_shape_token_mask(int q_len, int num_keys, int n_init, int n_local,
                                          int n_last, int prompt_len) {
  std::vector<uint8_t> mask(static_cast<size_t>(q_len) * num_keys, 0);
  const int off = num_keys - q_len;
  for (int r = 0; r < q_len; ++r) {
    const int p = off + r;
    const bool dense = n_last > 0 && p >= prompt_len - n_last;
    for (int j = 0; j <= p; ++j)
      mask[static_cast<size_t>(r) * num_keys + j] = dense || p - j < n_local || j < n_init;
  }
  return mask;
}

}  // namespace vlm
