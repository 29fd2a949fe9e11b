#include "kernels/cuda/sparse_estimate/cuda_boundary_lines.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_estimate/line_select.cuh"

namespace vlm::cuda {

void CudaBoundaryLines::estimate(const void* q, DType act, const PagedKVLayer& kv, const int32_t* table,
                                 const GridEstimateShape& shape, float scale, const uint8_t* code, bool want_q,
                                 bool want_2d, std::span<const BoundaryParams> params, cudaStream_t stream) {
  const int H = shape.num_heads, N = shape.num_keys, q_len = shape.q_len, off = N - q_len;
  VLM_CHECK(static_cast<int>(params.size()) == H && q_len > 0 && N >= q_len && params[0].last_q > 0 &&
                params[0].last_q <= 64,
            "boundary lines: {} params for {} heads, q_len {} keys {} last_q {}", params.size(), H, q_len, N,
            params.empty() ? 0 : params[0].last_q);
  num_heads_ = H, num_keys_ = N;
  // The estimating rows: per query modality (ascending code) its last last_q rows, ascending.
  std::vector<int32_t> words;  // the host tables: rows, then per kind anchors, start, order
  mq_codes_.clear();
  row_begin_.assign(1, 0);
  for (int mq = 0; mq < 256; ++mq) {
    std::vector<int32_t> pos;
    for (int r = q_len - 1; r >= 0 && static_cast<int>(pos.size()) < params[0].last_q; --r)
      if (code[off + r] == mq) pos.push_back(off + r);
    if (pos.empty()) continue;
    mq_codes_.push_back(mq);
    words.insert(words.end(), pos.rbegin(), pos.rend());
    row_begin_.push_back(static_cast<int32_t>(words.size()));
  }
  const int Mq = static_cast<int>(mq_codes_.size()), R_all = row_begin_.back();
  kinds_.assign(2, Grouping{});
  for (int slot = 0; slot < 2; ++slot) {
    if (!(slot == 0 ? want_q : want_2d)) continue;
    Grouping& k = kinds_[slot];
    std::vector<int32_t> group_of(256, -1), count(256, 0);
    if (slot == 0) {
      k.codes = {-1};
      k.start = {0, N};
    } else {
      for (int j = 0; j < N; ++j) ++count[code[j]];
      k.start = {0};
      for (int c = 0; c < 256; ++c)
        if (count[c] > 0) {
          group_of[c] = static_cast<int32_t>(k.codes.size());
          k.codes.push_back(c);
          k.start.push_back(k.start.back() + count[c]);
        }
    }
    const int G = static_cast<int>(k.codes.size());
    // Anchors [R_all, G]: the local index of the group's latest key at or before the row.
    k.anchor_at = static_cast<int64_t>(words.size());
    words.resize(words.size() + static_cast<size_t>(R_all) * G, -1);
    if (slot == 0) {
      for (int i = 0; i < R_all; ++i) words[k.anchor_at + i] = words[i];
    } else {
      std::vector<int32_t> seen(G, 0), fill(k.start.begin(), k.start.end() - 1), order(N);
      std::vector<std::pair<int32_t, int32_t>> rows(R_all);  // (position, row) by position
      for (int i = 0; i < R_all; ++i) rows[i] = {words[i], i};
      std::sort(rows.begin(), rows.end());
      size_t ri = 0;
      for (int j = 0; j < N; ++j) {
        const int g = group_of[code[j]];
        order[fill[g]++] = j;
        ++seen[g];
        for (; ri < rows.size() && rows[ri].first == j; ++ri)
          for (int gg = 0; gg < G; ++gg) words[k.anchor_at + static_cast<int64_t>(rows[ri].second) * G + gg] = seen[gg] - 1;
      }
      k.order_at = static_cast<int64_t>(words.size());
      words.insert(words.end(), order.begin(), order.end());
    }
    k.start_at = static_cast<int64_t>(words.size());
    words.insert(words.end(), k.start.begin(), k.start.end());
  }
  // A pageable source (copied when the call returns); stream order keeps the previous call's
  // kernels ahead of the overwrite.
  table_.reserve(words.size() * sizeof(int32_t));
  VLM_CUDA_CHECK(cudaMemcpyAsync(table_.get(), words.data(), words.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                 stream));
  const int32_t* dt = table_.as<int32_t>();

  // Scores [slot][H][Mq][2][N] of the estimated kinds, then the segments in memory order.
  const int nk = static_cast<int>(want_q) + static_cast<int>(want_2d);
  const int64_t slot_words = static_cast<int64_t>(H) * Mq * 2 * N;
  scores_.reserve(static_cast<size_t>(nk * slot_words) * sizeof(float));
  probs_.reserve(static_cast<size_t>(H) * 64 * N * sizeof(float));
  for (int m = 0; m < Mq; ++m) {
    GridEstimateShape sh = shape;
    sh.rows = row_begin_[m + 1] - row_begin_[m];
    sh.row_pos = dt + row_begin_[m];
    grid_last_q_probs(q, act, kv, table, sh, scale, probs_.as<float>(), stream);
    int at = 0;
    for (const Grouping& k : kinds_) {
      if (k.codes.empty()) continue;
      BoundaryScoreShape bs;
      bs.num_heads = H, bs.rows = sh.rows, bs.num_keys = N, bs.num_groups = static_cast<int>(k.codes.size());
      bs.mq = m, bs.num_mq = Mq;
      bs.forced_verticals = params[0].forced_verticals, bs.forced_slashes = params[0].forced_slashes;
      boundary_pair_scores(probs_.as<float>(), dt + k.anchor_at + static_cast<int64_t>(row_begin_[m]) * bs.num_groups,
                           dt + k.start_at, k.order_at < 0 ? nullptr : dt + k.order_at, bs,
                           scores_.as<float>() + at++ * slot_words, stream);
    }
  }
  std::vector<int64_t> begin, k_of;
  int at = 0;
  for (const Grouping& k : kinds_) {
    if (k.codes.empty()) continue;
    for (int h = 0; h < H; ++h)
      for (int m = 0; m < Mq; ++m)
        for (int w = 0; w < 2; ++w)
          for (size_t g = 0; g < k.codes.size(); ++g) {
            const int n = k.start[g + 1] - k.start[g];
            begin.push_back(at * slot_words + ((static_cast<int64_t>(h) * Mq + m) * 2 + w) * N + k.start[g]);
            k_of.push_back(std::min(n, w ? params[h].slash_size : params[h].vertical_size));
          }
    ++at;
  }
  const int S = static_cast<int>(k_of.size());
  begin.push_back(nk * slot_words);
  seg_ = begin;
  seg_.push_back(0);
  for (int s = 0; s < S; ++s) seg_.push_back(seg_.back() + k_of[s]);
  seg_.insert(seg_.end(), k_of.begin(), k_of.end());
  segd_.reserve(seg_.size() * sizeof(int64_t));
  VLM_CUDA_CHECK(cudaMemcpyAsync(segd_.get(), seg_.data(), seg_.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
  const int64_t picked = seg_[2 * S + 1];
  lists_.reserve(static_cast<size_t>(std::max<int64_t>(picked, 1)) * sizeof(int32_t));
  LineTopK a;
  a.scores = scores_.as<float>();
  a.total = nk * slot_words;
  a.num_segments = S;
  a.begin = segd_.as<int64_t>();
  a.out_begin = a.begin + S + 1;
  a.k = a.begin + 2 * (S + 1);
  a.out = lists_.as<int32_t>();
  scratch_.reserve(line_top_k_scratch_bytes(a.total, S));
  line_top_k(a, scratch_.get(), scratch_.bytes(), stream);
}

void CudaBoundaryLines::download(cudaStream_t stream) {
  const int S = static_cast<int>((seg_.size() - 2) / 3);
  const size_t n = static_cast<size_t>(seg_[2 * S + 1]);
  lists_h_.reserve(std::max<size_t>(n, 1) * sizeof(int32_t));
  VLM_CUDA_CHECK(cudaMemcpyAsync(lists_h_.get(), lists_.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
}

BoundaryLines CudaBoundaryLines::lines(BoundaryKind kind, int h) const {
  VLM_CHECK(kind != BoundaryKind::None, "boundary lines of kind None");
  const int slot = kind == BoundaryKind::Q ? 0 : 1;
  VLM_CHECK(!kinds_[slot].codes.empty(), "boundary lines of kind {} not estimated", static_cast<int>(kind));
  const int S = static_cast<int>((seg_.size() - 2) / 3), Mq = static_cast<int>(mq_codes_.size());
  // The segment index of (slot, h, m, w, g): slots, then heads, query modalities, w, groups.
  int first = 0;
  if (slot == 1 && !kinds_[0].codes.empty()) first = num_heads_ * Mq * 2;  // after the Q slot's (G = 1)
  const int G = static_cast<int>(kinds_[slot].codes.size());
  const int32_t* l = lists_h_.as<int32_t>();
  const int64_t* out_begin = seg_.data() + S + 1;
  const int64_t* k = seg_.data() + 2 * (S + 1);
  BoundaryLines out;
  out.kind = kind;
  for (int m = 0; m < Mq; ++m)
    for (int g = 0; g < G; ++g) {
      const int sv = first + ((h * Mq + m) * 2 + 0) * G + g, ss = first + ((h * Mq + m) * 2 + 1) * G + g;
      PairLines pl;
      pl.mq = mq_codes_[m];
      pl.mk = kinds_[slot].codes[g];
      pl.vertical.assign(l + out_begin[sv], l + out_begin[sv] + k[sv]);
      pl.slash.assign(std::make_reverse_iterator(l + out_begin[ss] + k[ss]), std::make_reverse_iterator(l + out_begin[ss]));
      out.pairs.push_back(std::move(pl));
    }
  return out;
}

}  // namespace vlm::cuda
