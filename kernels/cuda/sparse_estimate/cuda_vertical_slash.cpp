#include "kernels/cuda/sparse_estimate/cuda_vertical_slash.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/cuda/sparse_estimate/line_select.cuh"

namespace vlm::cuda {

void CudaVerticalSlash::estimate(const void* q, DType act, const PagedKVLayer& kv, const int32_t* table,
                                 const GridEstimateShape& sh, float scale, std::span<const VerticalSlashParams> params,
                                 cudaStream_t stream) {
  const int H = sh.num_heads, N = sh.num_keys;
  VLM_CHECK(static_cast<int>(params.size()) == H && sh.row_pos == nullptr, "vertical-slash estimate: {} params for {} heads",
            params.size(), H);
  num_heads_ = H;
  const size_t hn = static_cast<size_t>(H) * N;
  probs_.reserve(hn * sh.rows * sizeof(float));
  col_.reserve(hn * sizeof(double));
  slash_.reserve(hn * sizeof(double));
  scores_.reserve(2 * hn * sizeof(float));
  grid_last_q_probs(q, act, kv, table, sh, scale, probs_.as<float>(), stream);
  grid_line_sums(probs_.as<float>(), sh, col_.as<double>(), slash_.as<double>(), stream);
  vertical_slash_scores(col_.as<double>(), slash_.as<double>(), H, N, params[0].forced_verticals,
                        params[0].forced_slashes, scores_.as<float>(), stream);
  // Segments: h the verticals of head h, H + h its slashes; each N long.
  const int S = 2 * H;
  out_begin_h_.assign(S + 1, 0);
  k_h_.assign(S, 0);
  for (int s = 0; s < S; ++s) {
    const VerticalSlashParams& p = params[s % H];
    k_h_[s] = s < H ? std::min(N, std::max(p.vertical_size, 30)) : std::min(N, std::max(p.slash_size, 50));
    out_begin_h_[s + 1] = out_begin_h_[s] + k_h_[s];
  }
  // One upload of begin[S + 1], out_begin[S + 1] and k[S] (int64; a pageable source: copied when
  // the call returns).
  std::vector<int64_t> seg(3 * S + 2);
  for (int s = 0; s <= S; ++s) seg[s] = static_cast<int64_t>(s) * N;
  std::copy(out_begin_h_.begin(), out_begin_h_.end(), seg.begin() + S + 1);
  std::copy(k_h_.begin(), k_h_.end(), seg.begin() + 2 * (S + 1));
  seg_.reserve(seg.size() * sizeof(int64_t));
  VLM_CUDA_CHECK(cudaMemcpyAsync(seg_.get(), seg.data(), seg.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
  lists_.reserve(static_cast<size_t>(out_begin_h_[S]) * sizeof(int32_t));
  LineTopK a;
  a.scores = scores_.as<float>();
  a.total = static_cast<int64_t>(2 * hn);
  a.num_segments = S;
  a.begin = seg_.as<int64_t>();
  a.out_begin = a.begin + S + 1;
  a.k = a.begin + 2 * (S + 1);
  a.out = lists_.as<int32_t>();
  const size_t bytes = line_top_k_scratch_bytes(a.total, S);
  scratch_.reserve(bytes);
  line_top_k(a, scratch_.get(), scratch_.bytes(), stream);
}

void CudaVerticalSlash::download(cudaStream_t stream) {
  const size_t n = static_cast<size_t>(out_begin_h_.back());
  lists_h_.reserve(n * sizeof(int32_t));
  VLM_CUDA_CHECK(cudaMemcpyAsync(lists_h_.get(), lists_.get(), n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
}

VerticalSlashIndices CudaVerticalSlash::indices(int h) const {
  const int32_t* l = lists_h_.as<int32_t>();
  VerticalSlashIndices out;
  out.vertical.assign(l + offset(h), l + offset(h) + count(h));
  out.slash.assign(std::make_reverse_iterator(l + offset(num_heads_ + h) + count(num_heads_ + h)),
                   std::make_reverse_iterator(l + offset(num_heads_ + h)));
  return out;
}

}  // namespace vlm::cuda
