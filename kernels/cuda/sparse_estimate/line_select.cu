// line_select.cuh's kernels: the line scores (one thread per head and line) and the segmented
// top-k (one global radix sort).
#include <cmath>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/sparse_estimate/line_select.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 256;

int segment_bits(int num_segments) {
  int b = 0;
  while ((1 << b) < num_segments) ++b;
  return b;
}

// Grid (chunks, num_segments): key = segment << 32 | ~score bits (ascending key: segment, then
// score descending; scores >= 0 order as their bits), value = the element's index.
__global__ void keys_kernel(LineTopK a, uint64_t* keys, int32_t* vals) {
  const int s = blockIdx.y;
  const int64_t b0 = a.begin[s], b1 = a.begin[s + 1];
  for (int64_t i = b0 + int64_t(blockIdx.x) * kThreads + threadIdx.x; i < b1; i += int64_t(gridDim.x) * kThreads) {
    keys[i] = uint64_t(s) << 32 | (0xffffffffu - __float_as_uint(fmaxf(a.scores[i], 0.f)));
    vals[i] = static_cast<int32_t>(i);
  }
}

// Grid (chunks, num_segments): flags[sorted value] = 1 for the first k[s] of segment s.
__global__ void flag_kernel(LineTopK a, const int32_t* sorted, uint8_t* flags) {
  const int s = blockIdx.y;
  const int64_t b0 = a.begin[s];
  for (int j = blockIdx.x * kThreads + threadIdx.x; j < a.k[s]; j += gridDim.x * kThreads) flags[sorted[b0 + j]] = 1;
}

__global__ void iota_kernel(int64_t n, int32_t* x) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    x[i] = static_cast<int32_t>(i);
}

// Grid (chunks, num_segments): global -> segment-relative indices.
__global__ void relative_kernel(LineTopK a, const int32_t* picked) {
  const int s = blockIdx.y;
  const int64_t o = a.out_begin[s], b0 = a.begin[s];
  for (int j = blockIdx.x * kThreads + threadIdx.x; j < a.k[s]; j += gridDim.x * kThreads)
    a.out[o + j] = static_cast<int32_t>(picked[o + j] - b0);
}

struct Layout {
  size_t keys, keys_alt, vals, vals_alt, flags, picked, count, temp, total;
};

size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

Layout layout(int64_t n, int num_segments) {
  size_t sort_bytes = 0, select_bytes = 0;
  cub::DoubleBuffer<uint64_t> kb(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> vb(nullptr, nullptr);
  VLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, kb, vb, static_cast<int>(n), 0,
                                                 32 + segment_bits(num_segments)));
  VLM_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, select_bytes, static_cast<const int32_t*>(nullptr),
                                            static_cast<const uint8_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                            static_cast<int32_t*>(nullptr), static_cast<int>(n)));
  Layout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += align256(bytes);
    return here;
  };
  l.keys = take(n * 8);
  l.keys_alt = take(n * 8);
  l.vals = take(n * 4);
  l.vals_alt = take(n * 4);
  l.flags = take(n);
  l.picked = take(n * 4);
  l.count = take(4);
  l.temp = take(std::max(sort_bytes, select_bytes));
  l.total = at;
  return l;
}

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

size_t line_top_k_scratch_bytes(int64_t total, int num_segments) { return layout(total, num_segments).total; }

void line_top_k(const LineTopK& a, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  VLM_CHECK(a.total > 0 && a.total < (int64_t(1) << 31) && a.num_segments > 0 && a.num_segments <= 65535,
            "line top-k over {} scores in {} segments", a.total, a.num_segments);
  const Layout l = layout(a.total, a.num_segments);
  VLM_CHECK(scratch_bytes >= l.total, "line top-k scratch {} < {} bytes", scratch_bytes, l.total);
  auto* base = static_cast<uint8_t*>(scratch);
  cub::DoubleBuffer<uint64_t> kb(reinterpret_cast<uint64_t*>(base + l.keys), reinterpret_cast<uint64_t*>(base + l.keys_alt));
  cub::DoubleBuffer<int32_t> vb(reinterpret_cast<int32_t*>(base + l.vals), reinterpret_cast<int32_t*>(base + l.vals_alt));
  auto* flags = base + l.flags;
  auto* picked = reinterpret_cast<int32_t*>(base + l.picked);
  const int n = static_cast<int>(a.total);
  const int chunks = static_cast<int>(std::min<int64_t>(64, (a.total / a.num_segments + kThreads - 1) / kThreads + 1));
  const dim3 grid(chunks, a.num_segments);
  keys_kernel<<<grid, kThreads, 0, stream>>>(a, kb.Current(), vb.Current());
  VLM_CUDA_CHECK_LAUNCH();
  size_t temp = scratch_bytes - l.temp;
  VLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + l.temp, temp, kb, vb, n, 0, 32 + segment_bits(a.num_segments),
                                                 stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(flags, 0, a.total, stream));
  flag_kernel<<<grid, kThreads, 0, stream>>>(a, vb.Current(), flags);
  VLM_CUDA_CHECK_LAUNCH();
  // The indices 0..n-1 (in the keys' spare buffer, free after the sort) compacted by the flags.
  auto* iota = reinterpret_cast<int32_t*>(kb.Alternate());
  iota_kernel<<<std::min<int64_t>(1024, (a.total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(a.total, iota);
  VLM_CUDA_CHECK_LAUNCH();
  temp = scratch_bytes - l.temp;
  VLM_CUDA_CHECK(cub::DeviceSelect::Flagged(base + l.temp, temp, iota, flags, picked,
                                            reinterpret_cast<int32_t*>(base + l.count), n, stream));
  relative_kernel<<<grid, kThreads, 0, stream>>>(a, picked);
  VLM_CUDA_CHECK_LAUNCH();
}

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
