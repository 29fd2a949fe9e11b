#include "kernels/sparse_prefill/modality_boundary.h"

#include <algorithm>
#include <numeric>

#include "kernels/core/check.h"
#include "kernels/sparse_prefill/top_k.h"
#include "kernels/sparse_prefill/last_q_attention.h"

namespace vlm {
namespace {

// The key groups of a head: Q-boundary one group (all keys, code -1), 2D one per modality code
// present, in code order; k_order lists the groups one after the other.
struct KeyGroups {
  std::vector<int> codes;                   // [G] modality code of each group (-1: all)
  std::vector<int32_t> group_of_code;       // [256] group index, -1 if absent
  std::vector<int32_t> start;               // [G + 1] first k_order index of each group
  std::vector<int32_t> order;               // [N] positions, grouped (2D), else empty
  std::vector<int32_t> local;               // [N] local index of each position in its group
  std::vector<std::vector<int32_t>> upto;   // [G][N + 1] keys of the group at positions < p

  KeyGroups(BoundaryKind kind, const uint8_t* code, int N) : group_of_code(256, -1) {
    if (kind == BoundaryKind::Q) {
      codes = {-1};
      start = {0, N};
      local.resize(N);
      std::iota(local.begin(), local.end(), 0);
      return;
    }
    std::vector<int> count(256, 0);
    for (int j = 0; j < N; ++j) ++count[code[j]];
    for (int c = 0; c < 256; ++c)
      if (count[c] > 0) {
        group_of_code[c] = static_cast<int32_t>(codes.size());
        codes.push_back(c);
      }
    start.assign(codes.size() + 1, 0);
    for (size_t g = 0; g < codes.size(); ++g) start[g + 1] = start[g] + count[codes[g]];
    order.resize(N);
    local.resize(N);
    upto.assign(codes.size(), std::vector<int32_t>(N + 1, 0));
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int j = 0; j < N; ++j) {
      const int g = group_of_code[code[j]];
      local[j] = fill[g] - start[g];
      order[fill[g]++] = j;
      for (size_t h = 0; h < codes.size(); ++h) upto[h][j + 1] = upto[h][j] + (static_cast<int>(h) == g);
    }
  }
  int group_of(int mk) const { return mk < 0 ? 0 : group_of_code[mk]; }
  int size(int g) const { return start[g + 1] - start[g]; }
  // Anchor e(p): local index of the group's latest key <= p (-1: none).
  int anchor(int g, int p) const { return codes[g] < 0 ? p : upto[g][p + 1] - 1; }
  int position(int g, int b) const { return codes[g] < 0 ? b : order[start[g] + b]; }
};

std::vector<int32_t> modality_row_order(const uint8_t* code, int off, int q_len) {
  std::vector<int32_t> order(q_len);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return code[off + a] < code[off + b]; });
  return order;
}

}  // namespace

BoundaryLines estimate_boundary_lines(BoundaryKind kind, const uint8_t* code, const float* q, int H,
                                      int head, int q_len, const float* keys, int N, int D, float scale,
                                      const BoundaryParams& prm) {
  VLM_CHECK(kind != BoundaryKind::None && q_len > 0 && N >= q_len, "boundary lines: kind {} q_len {} keys {}",
            static_cast<int>(kind), q_len, N);
  const KeyGroups kg(kind, code, N);
  const int off = N - q_len;
  BoundaryLines out;
  out.kind = kind;
  std::vector<float> qrows, probs;
  std::vector<int32_t> pos;
  for (int mq = 0; mq < 256; ++mq) {
    pos.clear();
    for (int r = q_len - 1; r >= 0 && static_cast<int>(pos.size()) < prm.last_q; --r)
      if (code[off + r] == mq) pos.push_back(off + r);
    if (pos.empty()) continue;
    std::reverse(pos.begin(), pos.end());
    const int R = static_cast<int>(pos.size());
    qrows.resize(static_cast<size_t>(R) * D);
    for (int i = 0; i < R; ++i)
      std::copy_n(q + (static_cast<size_t>(pos[i] - off) * H + head) * D, D, qrows.data() + static_cast<size_t>(i) * D);
    probs.resize(static_cast<size_t>(R) * N);
    last_q_attention(qrows.data(), pos.data(), R, keys, N, D, scale, probs.data());
    for (size_t g = 0; g < kg.codes.size(); ++g) {
      const int n = kg.size(static_cast<int>(g));
      std::vector<float> vert(n, 0.0f), slash(n, 0.0f);
      for (int i = 0; i < R; ++i) {
        const int e = kg.anchor(static_cast<int>(g), pos[i]);
        for (int b = 0; b <= e; ++b) {
          const float a = probs[static_cast<size_t>(i) * N + kg.position(static_cast<int>(g), b)];
          vert[b] += a;
          slash[e - b] += a;
        }
      }
      for (int b = 0; b < std::min(n, prm.forced_verticals); ++b) vert[b] = INFINITY;
      for (int o = 0; o < std::min(n, prm.forced_slashes); ++o) slash[o] = INFINITY;
      PairLines pl;
      pl.mq = mq;
      pl.mk = kg.codes[g];
      pl.vertical = top_k_indices(vert, std::min(n, prm.vertical_size));
      pl.slash = top_k_indices(slash, std::min(n, prm.slash_size));
      std::sort(pl.vertical.begin(), pl.vertical.end());
      std::sort(pl.slash.begin(), pl.slash.end(), std::greater<>());
      out.pairs.push_back(std::move(pl));
    }
  }
  return out;
}

HeadPlan boundary_head_plan(const BoundaryLines& lines, const uint8_t* code, int q_len, int N, int block) {
  VLM_CHECK(lines.kind != BoundaryKind::None && block > 0 && N >= q_len, "boundary plan q_len {} keys {}", q_len, N);
  const KeyGroups kg(lines.kind, code, N);
  const int off = N - q_len;
  const int nqb = (q_len + block - 1) / block, nkb = (N + block - 1) / block;
  HeadPlan hp = empty_head_plan(nqb);
  hp.q_order = modality_row_order(code, off, q_len);
  if (lines.kind == BoundaryKind::TwoD) hp.k_order = kg.order;
  std::vector<uint8_t> marked(nkb, 0);
  std::vector<int32_t> anchors, cand;
  for (int m = 0; m < nqb; ++m) {
    std::fill(marked.begin(), marked.end(), 0);
    cand.clear();
    const int i0 = m * block, i1 = std::min(q_len, (m + 1) * block);
    for (const PairLines& pl : lines.pairs) {
      const int g = kg.group_of(pl.mk);
      if (g < 0) continue;
      anchors.clear();
      int maxpos = -1;
      for (int i = i0; i < i1; ++i) {
        const int p = off + hp.q_order[i];
        if (code[p] != pl.mq) continue;
        maxpos = std::max(maxpos, p);
        const int e = kg.anchor(g, p);
        if (e >= 0 && (anchors.empty() || anchors.back() != e)) anchors.push_back(e);
      }
      if (anchors.empty()) continue;
      std::sort(anchors.begin(), anchors.end());
      // Runs of consecutive anchors [e0, e1]: slash o covers local keys [e0 - o, e1 - o].
      for (size_t a = 0; a < anchors.size();) {
        size_t z = a;
        while (z + 1 < anchors.size() && anchors[z + 1] <= anchors[z] + 1) ++z;
        const int e0 = anchors[a], e1 = anchors[z];
        for (int o : pl.slash) {
          if (e1 - o < 0) continue;
          const int lo = kg.start[g] + std::max(0, e0 - o), hi = kg.start[g] + e1 - o;
          for (int b = lo / block; b <= hi / block; ++b) marked[b] = 1;
        }
        a = z + 1;
      }
      for (int v : pl.vertical) {
        const int j = kg.position(g, v);
        if (j <= maxpos) cand.push_back(j);
      }
    }
    for (int b = 0; b < nkb; ++b)
      if (marked[b]) hp.blocks.push_back(b * block);
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    for (int j : cand) {
      const int kidx = lines.kind == BoundaryKind::TwoD ? kg.start[kg.group_of(code[j])] + kg.local[j] : j;
      if (!marked[kidx / block]) hp.cols.push_back(j);
    }
    hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
    hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
  }
  return hp;
}

std::vector<uint8_t> boundary_token_mask(const BoundaryLines& lines, const uint8_t* code, int q_len, int N) {
  const KeyGroups kg(lines.kind, code, N);
  const int off = N - q_len;
  std::vector<uint8_t> mask(static_cast<size_t>(q_len) * N, 0);
  for (const PairLines& pl : lines.pairs) {
    const int g = kg.group_of(pl.mk);
    if (g < 0) continue;
    std::vector<uint8_t> is_v(kg.size(g), 0), is_s(kg.size(g), 0);
    for (int v : pl.vertical) is_v[v] = 1;
    for (int o : pl.slash) is_s[o] = 1;
    for (int r = 0; r < q_len; ++r) {
      const int p = off + r;
      if (code[p] != pl.mq) continue;
      const int e = kg.anchor(g, p);
      for (int j = 0; j <= p; ++j) {
        if (pl.mk >= 0 && code[j] != pl.mk) continue;
        const int b = kg.local[j];
        if (is_v[b] || (e - b >= 0 && is_s[e - b])) mask[static_cast<size_t>(r) * N + j] = 1;
      }
    }
  }
  return mask;
}

}  // namespace vlm
