#include "kernels/sparse_prefill/grid.h"

#include <algorithm>
#include <numeric>

#include "kernels/core/check.h"

namespace vlm {
namespace {

int mod(int a, int s) { return ((a % s) + s) % s; }

// Circular distance of two groups mod s.
int circ_dist(int a, int b, int s) {
  const int d = mod(a - b, s);
  return std::min(d, s - d);
}

struct Groups {
  int s, phase;
  std::vector<uint8_t> is_v, is_h;  // [s]
  Groups(const GridLayout& l, const GridParams& p) : s(l.stride), phase(l.phase), is_v(s, 0), is_h(s, 0) {
    if (p.use_vline)
      for (int g : l.vgroups) is_v[mod(g, s)] = 1;
    if (p.use_hline)
      for (int g : l.hgroups) is_h[mod(g, s)] = 1;
  }
  int of(int pos) const { return mod(pos - phase, s); }
};

}  // namespace

std::vector<int32_t> grid_order(int s, int phase, int first, int n) {
  std::vector<int32_t> order;
  order.reserve(n);
  for (int g = 0; g < s; ++g)
    for (int p = first + mod(g + phase - first, s); p < first + n; p += s) order.push_back(p - first);
  return order;
}

GridLayout fixed_grid_layout(int stride, int phase, const GridParams& p) {
  VLM_CHECK(stride > 0, "grid stride {}", stride);
  GridLayout l;
  l.stride = stride;
  l.phase = mod(phase, stride);
  for (int g = 0; g < std::min(p.num_vlines, stride); ++g) l.vgroups.push_back(g);
  for (int g = 0; g < std::min({p.num_hlines, p.num_vlines, stride}); ++g) l.hgroups.push_back(g);
  return l;
}

std::vector<int32_t> grid_stride_candidates(int N, const GridParams& p, std::span<const int32_t> known) {
  std::vector<int32_t> cands;
  if (p.stride > 0) {
    cands.push_back(p.stride);
  } else {
    for (int s = std::max(1, p.min_stride); s <= std::min(p.max_stride, std::max(1, N / 2)); ++s) cands.push_back(s);
    for (int s : known)
      if (s > 0) cands.push_back(s);
  }
  return cands;
}

GridStride choose_grid_stride(const double* col, const double* slash, int N, const GridParams& p,
                              std::span<const int32_t> known) {
  const int n_init = std::min(std::max(p.n_init, 0), N);
  const double sl_total = std::accumulate(slash + std::min(1, N), slash + N, 0.0);
  const double col_total = std::accumulate(col + n_init, col + N, 0.0);
  // The columns holding most of the non-sink mass (vertical search runs over them only).
  std::vector<int32_t> top(N - n_init);
  std::iota(top.begin(), top.end(), n_init);
  const size_t m = std::min<size_t>(top.size(), kGridTopColumns);
  std::partial_sort(top.begin(), top.begin() + m, top.end(),
                    [&](int a, int b) { return col[a] > col[b] || (col[a] == col[b] && a < b); });
  top.resize(m);

  const std::vector<int32_t> cands = grid_stride_candidates(N, p, known);
  std::vector<double> hist;
  auto score_of = [&](int s) {
    double best = 0.0;
    if (p.use_slash && sl_total > 0) {
      double sum = 0;
      for (int o = s; o < N; o += s) sum += slash[o];
      best = std::max(best, s * sum / sl_total);
    }
    if ((p.use_vline || p.use_hline) && col_total > 0) {
      hist.assign(s, 0.0);
      for (int j : top) hist[j % s] += col[j];
      best = std::max(best, s * *std::max_element(hist.begin(), hist.end()) / col_total);
    }
    return best;
  };
  std::vector<double> scores(cands.size());
  double best = 0.0;
  for (size_t i = 0; i < cands.size(); ++i) best = std::max(best, scores[i] = score_of(cands[i]));
  int chosen = -1;
  bool chosen_known = false;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (scores[i] < 0.9 * best) continue;
    const int s = cands[i];
    const bool is_known = std::find(known.begin(), known.end(), s) != known.end();
    if (chosen < 0 || (is_known && !chosen_known) ||
        (is_known == chosen_known && s < chosen)) {
      chosen = s;
      chosen_known = is_known;
    }
  }
  if (chosen < 0) chosen = cands.empty() ? std::max(1, p.min_stride) : cands[0];
  return {chosen, best};
}

GridLayout grid_layout_from_phase_mass(const GridStride& st, const std::vector<double>& phase_mass,
                                       const GridParams& p) {
  const int chosen = st.stride;
  VLM_CHECK(static_cast<int>(phase_mass.size()) == chosen, "{} phase masses for stride {}", phase_mass.size(), chosen);
  GridLayout l;
  l.stride = chosen;
  l.score = st.score;
  std::vector<int32_t> res(chosen);
  std::iota(res.begin(), res.end(), 0);
  std::stable_sort(res.begin(), res.end(), [&](int a, int b) { return phase_mass[a] > phase_mass[b]; });
  l.phase = res[0];
  for (int i = 0; i < std::min(p.num_vlines, chosen); ++i) l.vgroups.push_back(mod(res[i] - l.phase, chosen));
  for (int i = 0; i < std::min({p.num_hlines, p.num_vlines, chosen}); ++i) l.hgroups.push_back(l.vgroups[i]);
  return l;
}

GridLayout search_grid(const float* probs, const int32_t* q_pos, int R, int N, const GridParams& p,
                       std::span<const int32_t> known) {
  std::vector<double> slash(N, 0.0), col(N, 0.0);
  for (int r = 0; r < R; ++r) {
    const float* row = probs + static_cast<size_t>(r) * N;
    for (int j = 0; j <= q_pos[r]; ++j) {
      col[j] += row[j];
      slash[q_pos[r] - j] += row[j];
    }
  }
  const GridStride st = choose_grid_stride(col.data(), slash.data(), N, p, known);
  const int chosen = st.stride;
  const int n_init = std::min(std::max(p.n_init, 0), N);
  // Phases by vertical mass: the non-sink mass of each residue that the rows' own slash band
  // (offsets within +-band of a multiple of the stride) does not explain.
  std::vector<double> phase_mass(chosen, 0.0);
  const int band = p.use_slash ? std::max(p.band, 0) : -1;
  for (int r = 0; r < R; ++r) {
    const float* row = probs + static_cast<size_t>(r) * N;
    for (int j = n_init; j <= q_pos[r]; ++j) {
      if (circ_dist((q_pos[r] - j) % chosen, 0, chosen) <= band) continue;
      phase_mass[j % chosen] += row[j];
    }
  }
  return grid_layout_from_phase_mass(st, phase_mass, p);
}

HeadPlan grid_head_plan(const GridLayout& l, const GridParams& p, int q_len, int N, int block) {
  VLM_CHECK(l.stride > 0 && block > 0 && N >= q_len, "grid plan stride {} block {} q_len {} keys {}", l.stride,
            block, q_len, N);
  const int s = l.stride, off = N - q_len;
  const Groups gr(l, p);
  const int nqb = (q_len + block - 1) / block, nkb = (N + block - 1) / block;
  HeadPlan hp = empty_head_plan(nqb);
  hp.q_order = grid_order(s, l.phase, off, q_len);
  hp.k_order = grid_order(s, l.phase, 0, N);
  std::vector<int32_t> kstart(s + 1, 0), inv_k(N);
  for (int i = 0; i < N; ++i) {
    inv_k[hp.k_order[i]] = i;
    ++kstart[gr.of(hp.k_order[i]) + 1];
  }
  for (int g = 0; g < s; ++g) kstart[g + 1] += kstart[g];
  // Keys of group g at positions <= lim: a prefix of the group's run.
  auto count_upto = [&](int g, int lim) {
    const int j0 = mod(g + l.phase, s);
    return j0 <= lim ? (lim - j0) / s + 1 : 0;
  };
  const int band = p.use_slash ? std::max(p.band, 0) : -1;
  std::vector<int32_t> lim(s, -1);
  std::vector<uint8_t> marked(nkb, 0);
  std::vector<int32_t> list;  // the marked blocks of this query block (cleared from `marked` after)
  for (int m = 0; m < nqb; ++m) {
    int lim_all = -1, lim_v = -1, maxpos = -1;
    std::fill(lim.begin(), lim.end(), -1);
    for (int i = m * block; i < std::min(q_len, (m + 1) * block); ++i) {
      const int pos = off + hp.q_order[i], g = gr.of(pos);
      maxpos = std::max(maxpos, pos);
      lim_v = std::max(lim_v, pos);
      if (gr.is_h[g]) lim_all = std::max(lim_all, pos);
      if (band >= 0 && 2 * band + 1 >= s) {
        lim_all = std::max(lim_all, pos);  // the band spans every group
      } else {
        for (int d = -band; d <= band; ++d) {
          int& x = lim[mod(g + d, s)];
          x = std::max(x, pos);
        }
      }
    }
    list.clear();
    for (int g = 0; g < s; ++g) {
      const int L = std::max({lim[g], lim_all, gr.is_v[g] ? lim_v : -1});
      const int n = L >= 0 ? count_upto(g, L) : 0;
      if (n == 0) continue;
      for (int b = kstart[g] / block; b <= (kstart[g] + n - 1) / block; ++b)
        if (!marked[b]) marked[b] = 1, list.push_back(b);
    }
    std::sort(list.begin(), list.end());
    for (int b : list) hp.blocks.push_back(b * block);
    for (int j = 0; j < std::min(p.n_init, maxpos + 1); ++j)
      if (!marked[inv_k[j] / block]) hp.cols.push_back(j);
    for (int b : list) marked[b] = 0;
    hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
    hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
  }
  return hp;
}

std::vector<uint8_t> grid_token_mask(const GridLayout& l, const GridParams& p, int q_len, int N) {
  const Groups gr(l, p);
  const int off = N - q_len;
  std::vector<uint8_t> mask(static_cast<size_t>(q_len) * N, 0);
  for (int r = 0; r < q_len; ++r) {
    const int pos = off + r, gq = gr.of(pos);
    for (int j = 0; j <= pos; ++j) {
      const int gk = gr.of(j);
      mask[static_cast<size_t>(r) * N + j] =
          j < p.n_init || gr.is_h[gq] || gr.is_v[gk] || (p.use_slash && circ_dist(gq, gk, l.stride) <= p.band);
    }
  }
  return mask;
}

}  // namespace vlm
