#include "kernels/sparse_prefill/vertical_slash.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/core/check.h"
#include "kernels/sparse_prefill/top_k.h"

namespace vlm {

VerticalSlashIndices estimate_vertical_slash(const float* q_last, int last_q, const float* keys,
                                             int N, int D, float scale,
                                             const VerticalSlashParams& prm) {
  VLM_CHECK(last_q > 0 && last_q <= N, "last_q {} for {} keys", last_q, N);
  const int v_sz = std::min(N, std::max(prm.vertical_size, 30));
  const int s_sz = std::min(N, std::max(prm.slash_size, 50));
  std::vector<float> vert(N, 0.0f), slash(N, 0.0f), row(N);
  for (int r = 0; r < last_q; ++r) {
    const int pos = N - last_q + r;
    const float* qr = q_last + static_cast<size_t>(r) * D;
    float mx = -INFINITY;
    for (int j = 0; j <= pos; ++j) {
      const float* kj = keys + static_cast<size_t>(j) * D;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += qr[d] * kj[d];
      row[j] = dot * scale;
      mx = std::max(mx, row[j]);
    }
    float sum = 0.0f;
    for (int j = 0; j <= pos; ++j) sum += (row[j] = std::exp(row[j] - mx));
    const float inv = 1.0f / sum;
    for (int j = 0; j <= pos; ++j) {
      const float a = row[j] * inv;
      vert[j] += a;
      slash[pos - j] += a;
    }
  }
  for (int j = 0; j < std::min(N, prm.forced_verticals); ++j) vert[j] = INFINITY;
  for (int o = 0; o < std::min(N, prm.forced_slashes); ++o) slash[o] = INFINITY;
  VerticalSlashIndices out;
  out.vertical = top_k_indices(vert, v_sz);
  out.slash = top_k_indices(slash, s_sz);
  std::sort(out.vertical.begin(), out.vertical.end());
  std::sort(out.slash.begin(), out.slash.end(), std::greater<>());
  return out;
}

HeadPlan vertical_slash_head_plan(const VerticalSlashIndices& idx, int q_len, int N, int block) {
  const int off = N - q_len;
  const int nqb = (q_len + block - 1) / block;
  HeadPlan hp = empty_head_plan(nqb);
  std::vector<std::pair<int, int>> ranges;
  for (int m = 0; m < nqb; ++m) {
    const int lim = off + (m + 1) * block;  // end_m + off (end_m unclipped)
    const int causal_end = off + std::min(q_len, (m + 1) * block);  // one past the last row
    ranges.clear();
    for (int o : idx.slash) {  // descending offsets: ascending range ends
      if (o >= lim) continue;
      const int e = std::max(lim - o, block);
      if (ranges.empty() || e > ranges.back().second + block) ranges.push_back({e - block, e});
      else if (e > ranges.back().second) ranges.back().second += block;
    }
    for (const auto& [rs, re] : ranges)
      for (int k0 = rs; k0 < re && k0 < causal_end; k0 += block) hp.blocks.push_back(k0);
    size_t ri = 0;
    for (int v : idx.vertical) {
      if (v >= std::min(lim, causal_end)) break;
      while (ri < ranges.size() && ranges[ri].second <= v) ++ri;
      if (ri < ranges.size() && v >= ranges[ri].first) continue;  // inside a range
      hp.cols.push_back(v);
    }
    hp.block_ptr[m + 1] = static_cast<int32_t>(hp.blocks.size());
    hp.col_ptr[m + 1] = static_cast<int32_t>(hp.cols.size());
  }
  return hp;
}

void vertical_slash_blocks_ref(const VerticalSlashIndices& idx, int q_len, int N, int block,
                               int m, std::vector<int32_t>& block_starts,
                               std::vector<int32_t>& columns) {
  block_starts.clear();
  columns.clear();
  const int off = N - q_len;
  const int end_m = (m + 1) * block;
  const int nv = static_cast<int>(idx.vertical.size()), ns = static_cast<int>(idx.slash.size());
  auto save = [&](int rs, int re) {
    for (int k = rs; k < re; k += block) block_starts.push_back(k);
  };
  int v = 0, s = 0;
  int v_idx = nv > 0 ? idx.vertical[v++] : off + end_m + block;
  int s_idx = ns > 0 ? idx.slash[s++] : off + end_m + 1;
  while (s_idx >= end_m + off && s < ns) s_idx = idx.slash[s++];
  const bool has_slash = s_idx < end_m + off;
  int range_start, range_end;
  if (has_slash) {
    range_end = std::max(off + end_m - s_idx, block);
    range_start = range_end - block;
  } else {  // no slash reaches this row block: an empty range past the causal limit
    range_start = off + end_m;
    range_end = off + end_m + block;
  }
  bool slash_done = !has_slash;
  while (true) {
    if (v_idx < range_end) {
      if (v_idx < range_start) columns.push_back(v_idx);
      v_idx = v < nv ? idx.vertical[v++] : off + end_m + block;  // past everything once done
    } else if (!slash_done && s < ns) {
      const int e = std::max(off + end_m - idx.slash[s++], block);
      if (e > range_end + block) {
        save(range_start, range_end);
        range_start = e - block;
        range_end = e;
      } else if (e > range_end) {
        range_end += block;
      }
    } else if (!slash_done && v_idx < off + end_m) {
      // slashes exhausted, verticals left below the causal limit: flush, then an empty range
      save(range_start, range_end);
      range_start = off + end_m;
      range_end = off + end_m + block;
      slash_done = true;
    } else {
      if (range_start < off + end_m) save(range_start, range_end);
      break;
    }
  }
}

}  // namespace vlm
