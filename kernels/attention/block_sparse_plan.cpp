#include "kernels/attention/block_sparse_plan.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {
namespace {

// Checks that v is a permutation of [0, n).
void check_permutation(const std::vector<int32_t>& v, int n, const char* what, int head) {
  VLM_CHECK(static_cast<int>(v.size()) == n, "head {}: {} has {} entries, expected {}", head, what,
            v.size(), n);
  std::vector<uint8_t> seen(n, 0);
  for (int32_t x : v) {
    VLM_CHECK(x >= 0 && x < n && !seen[x], "head {}: {} is not a permutation ({})", head, what, x);
    seen[x] = 1;
  }
}

void check_csr(const std::vector<int32_t>& ptr, size_t n, int rows, const char* what, int head) {
  VLM_CHECK(static_cast<int>(ptr.size()) == rows + 1, "head {}: {}_ptr has {} entries, expected {}",
            head, what, ptr.size(), rows + 1);
  VLM_CHECK(ptr[0] == 0 && static_cast<size_t>(ptr[rows]) == n, "head {}: {}_ptr ends {}..{} for {}",
            head, what, ptr[0], ptr[rows], n);
  for (int m = 0; m < rows; ++m)
    VLM_CHECK(ptr[m] <= ptr[m + 1], "head {}: {}_ptr decreases at {}", head, what, m);
}

// Key positions of the key block starting at k0 of a head.
template <class F>
void for_block_keys(const BlockSparsePlan& p, const HeadPlan& hp, int k0, F&& f) {
  const int k1 = std::min(p.num_keys, k0 + p.block_n);
  for (int i = k0; i < k1; ++i) f(hp.k_order.empty() ? i : hp.k_order[i]);
}

}  // namespace

void validate_plan(const BlockSparsePlan& p) {
  VLM_CHECK(p.q_len >= 0 && p.num_keys >= p.q_len, "plan q_len {} num_keys {}", p.q_len, p.num_keys);
  VLM_CHECK(p.block_m > 0 && p.block_n > 0, "plan blocks {}x{}", p.block_m, p.block_n);
  const int nqb = p.num_qblocks();
  for (int h = 0; h < static_cast<int>(p.heads.size()); ++h) {
    const HeadPlan& hp = p.heads[h];
    if (!hp.q_order.empty()) check_permutation(hp.q_order, p.q_len, "q_order", h);
    if (!hp.k_order.empty()) check_permutation(hp.k_order, p.num_keys, "k_order", h);
    check_csr(hp.block_ptr, hp.blocks.size(), nqb, "block", h);
    check_csr(hp.col_ptr, hp.cols.size(), nqb, "col", h);
    std::vector<int32_t> owner(p.num_keys, -1);  // query block whose blocks cover the key
    for (int m = 0; m < nqb; ++m) {
      for (int i = hp.block_ptr[m]; i < hp.block_ptr[m + 1]; ++i) {
        const int k0 = hp.blocks[i];
        VLM_CHECK(k0 >= 0 && k0 < p.num_keys, "head {} qblock {}: key block at {} outside [0, {})",
                  h, m, k0, p.num_keys);
        for_block_keys(p, hp, k0, [&](int j) {
          VLM_CHECK(owner[j] != m, "head {} qblock {}: key {} in two listed blocks", h, m, j);
          owner[j] = m;
        });
      }
      for (int i = hp.col_ptr[m]; i < hp.col_ptr[m + 1]; ++i) {
        const int j = hp.cols[i];
        VLM_CHECK(j >= 0 && j < p.num_keys, "head {} qblock {}: column {} outside [0, {})", h, m, j,
                  p.num_keys);
        VLM_CHECK(i == hp.col_ptr[m] || hp.cols[i - 1] < j, "head {} qblock {}: columns not ascending",
                  h, m);
        VLM_CHECK(owner[j] != m, "head {} qblock {}: column {} inside a listed block", h, m, j);
      }
    }
  }
}

HeadPlan empty_head_plan(int num_qblocks) {
  HeadPlan hp;
  hp.block_ptr.assign(num_qblocks + 1, 0);
  hp.col_ptr.assign(num_qblocks + 1, 0);
  return hp;
}

HeadPlan dense_head_plan(int q_len, int num_keys, int block_m, int block_n) {
  const int nqb = (q_len + block_m - 1) / block_m;
  const int off = num_keys - q_len;
  HeadPlan hp = empty_head_plan(nqb);
  for (int m = 0; m < nqb; ++m) {
    const int last = off + std::min(q_len, (m + 1) * block_m) - 1;  // last row's position
    for (int b = 0; b <= last / block_n; ++b) hp.blocks.push_back(b * block_n);
    hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
  }
  return hp;
}

BlockSparsePlan dense_plan(int q_len, int num_keys, int num_heads, int block_m, int block_n) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = num_keys;
  p.block_m = block_m;
  p.block_n = block_n;
  p.heads.assign(num_heads, dense_head_plan(q_len, num_keys, block_m, block_n));
  return p;
}

std::vector<uint8_t> head_plan_mask(const BlockSparsePlan& p, int head) {
  const HeadPlan& hp = p.heads.at(head);
  const int N = p.num_keys, off = p.offset();
  std::vector<uint8_t> mask(static_cast<size_t>(p.q_len) * N, 0);
  std::vector<uint8_t> keys(N);
  for (int m = 0; m < p.num_qblocks(); ++m) {
    std::fill(keys.begin(), keys.end(), 0);
    for (int i = hp.block_ptr[m]; i < hp.block_ptr[m + 1]; ++i)
      for_block_keys(p, hp, hp.blocks[i], [&](int j) { keys[j] = 1; });
    for (int i = hp.col_ptr[m]; i < hp.col_ptr[m + 1]; ++i) keys[hp.cols[i]] = 1;
    for (int i = m * p.block_m; i < std::min(p.q_len, (m + 1) * p.block_m); ++i) {
      const int r = hp.q_order.empty() ? i : hp.q_order[i];
      for (int j = 0; j <= off + r; ++j) mask[static_cast<size_t>(r) * N + j] = keys[j];
    }
  }
  return mask;
}

double head_plan_token_density(const BlockSparsePlan& p, int head) {
  const auto mask = head_plan_mask(p, head);
  double kept = 0, causal = 0;
  for (int r = 0; r < p.q_len; ++r) {
    causal += p.offset() + r + 1;
    for (int j = 0; j <= p.offset() + r; ++j) kept += mask[static_cast<size_t>(r) * p.num_keys + j];
  }
  return causal > 0 ? kept / causal : 1.0;
}

BlockCounts plan_block_counts(const BlockSparsePlan& p) {
  BlockCounts c;
  for (const HeadPlan& hp : p.heads)
    c.computed += static_cast<double>(hp.blocks.size()) + static_cast<double>(hp.cols.size()) / p.block_n;
  c.causal = causal_key_blocks(p.q_len, p.num_keys, p.block_m, p.block_n) * static_cast<double>(p.heads.size());
  return c;
}

double causal_key_blocks(int q_len, int num_keys, int block_m, int block_n) {
  double causal = 0;
  for (int m = 0; m < (q_len + block_m - 1) / block_m; ++m)
    causal += (num_keys - q_len + std::min(q_len, (m + 1) * block_m) - 1) / block_n + 1;
  return causal;
}

double plan_block_density(const BlockSparsePlan& p) {
  const BlockCounts c = plan_block_counts(p);
  return c.causal > 0 ? c.computed / c.causal : 1.0;
}

}  // namespace vlm
