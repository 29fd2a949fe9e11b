// line_scores.cuh's kernels: one thread per (head, line).
#include <cmath>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/sparse_prefill/line_scores.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 256;

// Grid (ceil(N / kThreads), H).
__global__ void vs_scores_kernel(const double* col, const double* slash, int H, int N, int fv, int fs, float* scores) {
  const int h = blockIdx.y, j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= N) return;
  const int64_t i = int64_t(h) * N + j;
  scores[i] = j < fv ? INFINITY : static_cast<float>(col[i]);
  scores[int64_t(H) * N + i] = j < fs ? INFINITY : static_cast<float>(slash[i]);
}

// Grid (ceil(N / kThreads), H): thread k of the key order (group g, local index t = k - start[g]).
__global__ void boundary_scores_kernel(const float* probs, const int32_t* anchor, const int32_t* start,
                                       const int32_t* order, BoundaryScoreShape sh, float* scores) {
  const int h = blockIdx.y, k = blockIdx.x * kThreads + threadIdx.x, N = sh.num_keys;
  if (k >= N) return;
  int g = 0;
  while (g + 1 < sh.num_groups && start[g + 1] <= k) ++g;
  const int s0 = start[g], t = k - s0;
  const float* p = probs + int64_t(h) * sh.rows * N;
  double v = 0, s = 0;
  for (int i = 0; i < sh.rows; ++i) {
    const int e = anchor[i * sh.num_groups + g];
    const float* row = p + int64_t(i) * N;
    if (t <= e) {
      v += row[order ? order[s0 + t] : t];          // vertical: local key t
      s += row[order ? order[s0 + e - t] : e - t];  // slash: offset t, local key e - t
    }
  }
  float* out = scores + (int64_t(h) * sh.num_mq + sh.mq) * 2 * N;
  out[k] = t < sh.forced_verticals ? INFINITY : static_cast<float>(v);
  out[N + k] = t < sh.forced_slashes ? INFINITY : static_cast<float>(s);
}

}  // namespace

void vertical_slash_scores(const double* col, const double* slash, int H, int N, int fv, int fs, float* scores,
                           cudaStream_t stream) {
  vs_scores_kernel<<<dim3((N + kThreads - 1) / kThreads, H), kThreads, 0, stream>>>(col, slash, H, N, fv, fs, scores);
  VLM_CUDA_CHECK_LAUNCH();
}

void boundary_pair_scores(const float* probs, const int32_t* anchor, const int32_t* start, const int32_t* order,
                          const BoundaryScoreShape& sh, float* scores, cudaStream_t stream) {
  boundary_scores_kernel<<<dim3((sh.num_keys + kThreads - 1) / kThreads, sh.num_heads), kThreads, 0, stream>>>(
      probs, anchor, start, order, sh, scores);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
