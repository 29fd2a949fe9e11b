#include "kernels/cuda/attention/cuda_grid_search.h"

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

}  // namespace vlm::cuda
