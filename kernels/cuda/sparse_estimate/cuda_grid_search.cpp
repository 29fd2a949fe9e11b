#include "kernels/cuda/sparse_estimate/cuda_grid_search.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/core/thread_pool.h"

namespace vlm::cuda {

std::vector<GridLayout> CudaGridSearch::search(const void* q, DType act, const PagedKVLayer& kv,
                                               const int32_t* block_table, const GridEstimateShape& sh, float scale,
                                               const GridParams& p, std::span<const int32_t> known,
                                               cudaStream_t stream) {
  const int H = sh.num_heads, N = sh.num_keys;
  const size_t hn = static_cast<size_t>(H) * N;
  probs_.reserve(hn * sh.rows * sizeof(float));
  col_.reserve(hn * sizeof(double));
  slash_.reserve(hn * sizeof(double));
  grid_last_q_probs(q, act, kv, block_table, sh, scale, probs_.as<float>(), stream);
  grid_line_sums(probs_.as<float>(), sh, col_.as<double>(), slash_.as<double>(), stream);
  if (marker) marker("grid_scores");
  if (device_choice && p.num_vlines <= kGridChoiceMaxLines) {
    const std::vector<int32_t> cands = grid_stride_candidates(N, p, known);
    if (!cands.empty() && *std::max_element(cands.begin(), cands.end()) <= 4096)
      return choose_on_device(sh, p, cands, known, stream);
  }
  sums_h_.reserve(2 * hn * sizeof(double));
  const double* col_h = sums_h_.as<double>();
  const double* slash_h = col_h + hn;
  VLM_CUDA_CHECK(cudaMemcpyAsync(sums_h_.get(), col_.get(), hn * sizeof(double), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaMemcpyAsync(sums_h_.as<double>() + hn, slash_.get(), hn * sizeof(double), cudaMemcpyDeviceToHost,
                                 stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<GridStride> st(H);
  global_thread_pool().run_tasks(H, [&](int64_t h) {
    st[h] = choose_grid_stride(col_h + h * N, slash_h + h * N, N, p, known);
  });
  std::vector<int32_t> strides(H);
  int max_stride = 1;
  for (int h = 0; h < H; ++h) max_stride = std::max(max_stride, strides[h] = st[h].stride);
  strides_.reserve(H * sizeof(int32_t));
  phase_.reserve(static_cast<size_t>(H) * max_stride * sizeof(double));
  VLM_CUDA_CHECK(cudaMemcpyAsync(strides_.get(), strides.data(), H * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  const int band = p.use_slash ? std::max(p.band, 0) : -1;
  const int n_init = std::min(std::max(p.n_init, 0), N);
  grid_phase_mass(probs_.as<float>(), sh, strides_.as<int32_t>(), max_stride, band, n_init, phase_.as<double>(),
                  stream);
  phase_h_.resize(static_cast<size_t>(H) * max_stride);
  VLM_CUDA_CHECK(cudaMemcpyAsync(phase_h_.data(), phase_.get(), phase_h_.size() * sizeof(double),
                                 cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<GridLayout> out(H);
  for (int h = 0; h < H; ++h) {
    const double* pm = phase_h_.data() + static_cast<size_t>(h) * max_stride;
    out[h] = grid_layout_from_phase_mass(st[h], std::vector<double>(pm, pm + st[h].stride), p);
  }
  if (marker) marker("grid_choose_host");
  return out;
}

std::vector<GridLayout> CudaGridSearch::choose_on_device(const GridEstimateShape& sh, const GridParams& p,
                                                         const std::vector<int32_t>& cands,
                                                         std::span<const int32_t> known, cudaStream_t stream) {
  const int H = sh.num_heads, N = sh.num_keys, C = static_cast<int>(cands.size());
  GridChoiceShape cs;
  cs.num_heads = H;
  cs.num_keys = N;
  cs.n_init = std::min(std::max(p.n_init, 0), N);
  cs.num_cands = C;
  cs.max_cand = *std::max_element(cands.begin(), cands.end());
  cs.num_known = static_cast<int>(known.size());
  cs.use_slash = p.use_slash;
  cs.use_lines = p.use_vline || p.use_hline;
  cs.num_vlines = p.num_vlines;
  cs.num_hlines = p.num_hlines;
  // Candidates then known strides (pageable sources: copied when the calls return).
  cands_.reserve((C + known.size()) * sizeof(int32_t));
  int32_t* d_cands = cands_.as<int32_t>();
  VLM_CUDA_CHECK(cudaMemcpyAsync(d_cands, cands.data(), C * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  if (!known.empty())
    VLM_CUDA_CHECK(cudaMemcpyAsync(d_cands + C, known.data(), known.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream));
  // Scratch: f64 totals [2H], top keys [H, kGridChoiceTop], candidate scores [H C], scores [H]; i32
  // top indices [H, kGridChoiceTop], strides [H].
  const size_t ht = static_cast<size_t>(H) * kGridChoiceTop;
  choice_f64_.reserve((2 * H + ht + static_cast<size_t>(H) * C + H) * sizeof(double));
  choice_i32_.reserve((ht + static_cast<size_t>(H)) * sizeof(int32_t));
  GridChoiceScratch w;
  w.totals = choice_f64_.as<double>();
  w.top_keys = w.totals + 2 * H;
  w.cand_scores = w.top_keys + ht;
  double* scores = w.cand_scores + static_cast<size_t>(H) * C;
  w.top_idx = choice_i32_.as<int32_t>();
  int32_t* strides = w.top_idx + ht;
  grid_choose_strides(col_.as<double>(), slash_.as<double>(), d_cands, d_cands + C, cs, w, strides, scores, stream);
  const int band = p.use_slash ? std::max(p.band, 0) : -1;
  phase_.reserve(static_cast<size_t>(H) * cs.max_cand * sizeof(double));
  grid_phase_mass(probs_.as<float>(), sh, strides, cs.max_cand, band, cs.n_init, phase_.as<double>(), stream);
  layouts_d_.reserve(H * sizeof(DeviceGridLayout));
  grid_layouts_from_phase(phase_.as<double>(), cs.max_cand, strides, scores, cs, layouts_d_.as<DeviceGridLayout>(),
                          stream);
  layouts_h_.reserve(H * sizeof(DeviceGridLayout));
  VLM_CUDA_CHECK(cudaMemcpyAsync(layouts_h_.get(), layouts_d_.get(), H * sizeof(DeviceGridLayout),
                                 cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<GridLayout> out(H);
  const DeviceGridLayout* dl = layouts_h_.as<DeviceGridLayout>();
  for (int h = 0; h < H; ++h) {
    GridLayout& l = out[h];
    l.stride = dl[h].stride;
    l.phase = dl[h].phase;
    l.score = dl[h].score;
    l.vgroups.assign(dl[h].v, dl[h].v + dl[h].nv);
    l.hgroups.assign(dl[h].h, dl[h].h + dl[h].nh);
  }
  if (marker) marker("grid_choose_host");
  return out;
}

}  // namespace vlm::cuda
