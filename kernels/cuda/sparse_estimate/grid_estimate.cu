// The grid search's device kernels (grid_estimate.cuh): last-query scores (f32 FMA, keys and
// query rows staged in shared memory), row softmax, line sums and phase masses. Plain CUDA cores:
// R = 64 rows per head is a small GEMM next to the attention it plans.
#include <cuda_runtime.h>

#include <cmath>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"

namespace vlm::cuda {
namespace {

constexpr int kRows = 64;  // max estimation rows
constexpr int kKeys = 64;  // keys per CTA of the score kernel
constexpr int kThreads = 256;

// The position of estimating row r (GridEstimateShape::row_pos, else the last rows).
__device__ __forceinline__ int row_position(const GridEstimateShape& sh, int r) {
  return sh.row_pos ? sh.row_pos[r] : sh.num_keys - sh.rows + r;
}

// Grid (ceil(N / kKeys), H). probs[h][r][j] = scale * q_r . k_j, or -inf past pos_r.
__global__ void __launch_bounds__(kThreads)
scores_kernel(const void* q, DType act, KVView kv, DType kv_dtype, const int32_t* table, GridEstimateShape sh,
              float scale, float* probs) {
  extern __shared__ float smem[];
  const int D = kv.head_dim, R = sh.rows, N = sh.num_keys, H = sh.num_heads;
  float* qs = smem;               // [R][D]
  float* ks = smem + kRows * D;   // [kKeys][D + 1]
  const int h = blockIdx.y, hk = h / (H / kv.num_kv_heads), j0 = blockIdx.x * kKeys;
  for (int i = threadIdx.x; i < R * D; i += kThreads) {
    const int r = i / D, d = i % D;
    qs[i] = load_f32(q, act, (int64_t(sh.t0 + row_position(sh, r) - (N - sh.q_len)) * H + h) * D + d);
  }
  for (int i = threadIdx.x; i < kKeys * D; i += kThreads) {
    const int jj = i / D, d = i % D, j = j0 + jj;
    ks[jj * (D + 1) + d] = j < N ? load_f32(kv.k, kv_dtype, kv.token_offset(table, hk, j) + d) : 0.f;
  }
  __syncthreads();
  const int jj = threadIdx.x % kKeys, j = j0 + jj, r0 = threadIdx.x / kKeys;
  if (j >= N) return;
  // Rows r0 + 4 i of this thread's key, 4 dimensions per step: one float4 (a warp broadcast) of
  // each row and 4 scalar key values per 16 FMAs; each row's sum runs over d in order.
  constexpr int kPer = kRows / (kThreads / kKeys);
  float acc[kPer] = {};
  const float* kr = ks + jj * (D + 1);
  for (int d = 0; d < D; d += 4) {
    const float k0 = kr[d], k1 = kr[d + 1], k2 = kr[d + 2], k3 = kr[d + 3];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int r = r0 + i * (kThreads / kKeys);
      if (r >= R) break;
      const float4 qv = *reinterpret_cast<const float4*>(qs + r * D + d);
      acc[i] = fmaf(qv.x, k0, acc[i]);
      acc[i] = fmaf(qv.y, k1, acc[i]);
      acc[i] = fmaf(qv.z, k2, acc[i]);
      acc[i] = fmaf(qv.w, k3, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int r = r0 + i * (kThreads / kKeys);
    if (r >= R) break;
    probs[(int64_t(h) * R + r) * N + j] = j <= row_position(sh, r) ? acc[i] * scale : -INFINITY;
  }
}

__device__ float block_reduce(float x, bool is_max, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < kThreads / 32; ++w) x = is_max ? fmaxf(x, red[w]) : x + red[w];
  return x;
}

// Grid (R, H): softmax of one row in place (zeros past pos_r).
__global__ void __launch_bounds__(kThreads) softmax_kernel(GridEstimateShape sh, float* probs) {
  __shared__ float red[kThreads / 32];
  const int N = sh.num_keys, r = blockIdx.x;
  float* row = probs + (int64_t(blockIdx.y) * sh.rows + r) * N;
  const int n = row_position(sh, r) + 1;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, row[j]);
  mx = block_reduce(mx, true, red);
  float sum = 0.f;
  for (int j = threadIdx.x; j < n; j += kThreads) sum += (row[j] = expf(row[j] - mx));
  sum = block_reduce(sum, false, red);
  const float inv = 1.f / sum;
  for (int j = threadIdx.x; j < N; j += kThreads) row[j] = j < n ? row[j] * inv : 0.f;
}

// Grid (ceil(N / kThreads), H).
__global__ void __launch_bounds__(kThreads)
sums_kernel(const float* probs, GridEstimateShape sh, double* col, double* slash) {
  const int N = sh.num_keys, R = sh.rows, h = blockIdx.y;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= N) return;
  const float* p = probs + int64_t(h) * R * N;
  double c = 0, s = 0;
  for (int r = 0; r < R; ++r) {
    const int pos = N - R + r;
    if (j <= pos) c += p[int64_t(r) * N + j];
    if (pos - j >= 0) s += p[int64_t(r) * N + pos - j];  // offset o = j
  }
  col[int64_t(h) * N + j] = c;
  slash[int64_t(h) * N + j] = s;
}

// Grid (ceil(N / kThreads), H): one key per thread, its residue fixed; one atomic per thread.
__global__ void __launch_bounds__(kThreads)
phase_kernel(const float* probs, GridEstimateShape sh, const int32_t* strides, int max_stride, int band, int n_init,
             double* pm) {
  const int N = sh.num_keys, R = sh.rows, h = blockIdx.y;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= N || j < n_init) return;
  const int s = strides[h];
  const float* p = probs + int64_t(h) * R * N;
  double acc = 0;
  for (int r = 0; r < R; ++r) {
    const int pos = N - R + r;
    if (j > pos) continue;
    const int d = (pos - j) % s;
    if (min(d, s - d) <= band) continue;
    acc += p[int64_t(r) * N + j];
  }
  if (acc != 0) atomicAdd(pm + int64_t(h) * max_stride + j % s, acc);
}

// ---- The stride and layout choice (grid_choose_strides, grid_layouts_from_phase). ----
constexpr int kTop = 512;  // kGridTopColumns (kernels/sparse_prefill/grid.h)

// Grid (H): thread 0 the slash total (offsets 1..N-1), thread 1 the column total (n_init..N-1),
// each summed in order as std::accumulate does; idx_in[h][j] = j; the sort's segments.
__global__ void choice_setup_kernel(const double* col, const double* slash, GridChoiceShape sh, double* totals,
                                    int32_t* idx_in, int32_t* seg) {
  const int h = blockIdx.x, N = sh.num_keys;
  const double* c = col + int64_t(h) * N;
  const double* s = slash + int64_t(h) * N;
  if (threadIdx.x == 0) {
    double t = 0;
    for (int o = min(1, N); o < N; ++o) t += s[o];
    totals[2 * h] = t;
  } else if (threadIdx.x == 1) {
    double t = 0;
    for (int j = sh.n_init; j < N; ++j) t += c[j];
    totals[2 * h + 1] = t;
  } else if (threadIdx.x == 2) {
    seg[h] = h * N + sh.n_init;
    seg[sh.num_heads + h] = (h + 1) * N;
  }
  for (int j = threadIdx.x; j < N; j += blockDim.x) idx_in[int64_t(h) * N + j] = j;
}

// Grid (H, ceil(C / 4)), 4 warps, one candidate each: its score as choose_grid_stride's score_of
// (slash sum and residue histogram summed by one lane in the host's order; the histogram in
// shared memory, max_cand doubles per warp, after the top columns).
__global__ void __launch_bounds__(128)
cand_scores_kernel(const double* slash, const double* top_keys, const int32_t* top_idx, const double* totals,
                   const int32_t* cands, GridChoiceShape sh, double* cand_scores) {
  extern __shared__ double dsm[];
  double* tval = dsm;                                        // [kTop]
  int32_t* tidx = reinterpret_cast<int32_t*>(dsm + kTop);    // [kTop]
  double* hist = dsm + kTop + kTop / 2 + (threadIdx.x / 32) * sh.max_cand;
  const int h = blockIdx.x, N = sh.num_keys, lane = threadIdx.x % 32;
  const int m = min(N - sh.n_init, kTop);
  const int64_t base = int64_t(h) * N + sh.n_init;
  for (int i = threadIdx.x; i < m; i += blockDim.x) tval[i] = top_keys[base + i], tidx[i] = top_idx[base + i];
  __syncthreads();
  const int c = blockIdx.y * 4 + threadIdx.x / 32;
  if (c >= sh.num_cands) return;
  const int s = cands[c];
  const double sl_total = totals[2 * h], col_total = totals[2 * h + 1];
  double best = 0.0;
  if (sh.use_slash && sl_total > 0 && lane == 0) {
    const double* sl = slash + int64_t(h) * N;
    double sum = 0;
    for (int o = s; o < N; o += s) sum += sl[o];
    best = fmax(best, __ddiv_rn(__dmul_rn(double(s), sum), sl_total));
  }
  if (sh.use_lines && col_total > 0) {
    for (int i = lane; i < s; i += 32) hist[i] = 0.0;
    __syncwarp();
    if (lane == 0)
      for (int i = 0; i < m; ++i) hist[tidx[i] % s] += tval[i];
    __syncwarp();
    double mx = -INFINITY;
    for (int i = lane; i < s; i += 32) mx = fmax(mx, hist[i]);
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) best = fmax(best, __ddiv_rn(__dmul_rn(double(s), mx), col_total));
  }
  if (lane == 0) cand_scores[int64_t(h) * sh.num_cands + c] = best;
}

// Grid (H), one thread: choose_grid_stride's choice over the scored candidates.
__global__ void choose_kernel(const double* cand_scores, const int32_t* cands, const int32_t* known,
                              GridChoiceShape sh, int32_t* strides, double* scores) {
  if (threadIdx.x != 0) return;
  const int h = blockIdx.x;
  const double* sc = cand_scores + int64_t(h) * sh.num_cands;
  double best = 0.0;
  for (int i = 0; i < sh.num_cands; ++i) best = fmax(best, sc[i]);
  int chosen = -1;
  bool chosen_known = false;
  for (int i = 0; i < sh.num_cands; ++i) {
    if (sc[i] < __dmul_rn(0.9, best)) continue;
    const int s = cands[i];
    bool is_known = false;
    for (int k = 0; k < sh.num_known; ++k) is_known |= known[k] == s;
    if (chosen < 0 || (is_known && !chosen_known) || (is_known == chosen_known && s < chosen)) {
      chosen = s;
      chosen_known = is_known;
    }
  }
  strides[h] = chosen < 0 ? cands[0] : chosen;
  scores[h] = best;
}

// Grid (H), one thread: grid_layout_from_phase_mass (the residues by phase mass, descending,
// ties in index order as its stable sort).
__global__ void layout_kernel(const double* phase_mass, int max_stride, const int32_t* strides, const double* scores,
                              GridChoiceShape sh, DeviceGridLayout* layouts) {
  if (threadIdx.x != 0) return;
  const int h = blockIdx.x, s = strides[h];
  const double* pm = phase_mass + int64_t(h) * max_stride;
  DeviceGridLayout l{};
  l.stride = s;
  l.score = scores[h];
  const int nv = min(sh.num_vlines, s);
  int res[kGridChoiceMaxLines];
  for (int t = 0; t < max(nv, 1); ++t) {
    int bi = -1;
    for (int i = 0; i < s; ++i) {
      bool taken = false;
      for (int u = 0; u < t; ++u) taken |= res[u] == i;
      if (!taken && (bi < 0 || pm[i] > pm[bi])) bi = i;
    }
    res[t] = bi;
  }
  l.phase = res[0];
  l.nv = nv;
  for (int i = 0; i < nv; ++i) l.v[i] = ((res[i] - l.phase) % s + s) % s;
  l.nh = min(min(sh.num_hlines, sh.num_vlines), s);
  for (int i = 0; i < l.nh; ++i) l.h[i] = l.v[i];
  layouts[h] = l;
}

}  // namespace

size_t grid_choice_temp_bytes(int H, int N) {
  size_t bytes = 0;
  VLM_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const double*>(nullptr), static_cast<double*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), H * N, H,
      static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr)));
  return bytes;
}

void grid_choose_strides(const double* col, const double* slash, const int32_t* cands, const int32_t* known,
                         const GridChoiceShape& sh, const GridChoiceScratch& w, int32_t* strides, double* scores,
                         cudaStream_t stream) {
  const int H = sh.num_heads, N = sh.num_keys;
  VLM_CHECK(sh.num_cands > 0 && sh.max_cand >= 1 && sh.max_cand <= 4096 && sh.num_vlines <= kGridChoiceMaxLines,
            "grid choice: {} candidates up to {}, {} vertical lines", sh.num_cands, sh.max_cand, sh.num_vlines);
  choice_setup_kernel<<<H, 256, 0, stream>>>(col, slash, sh, w.totals, w.idx_in, w.seg);
  VLM_CUDA_CHECK_LAUNCH();
  size_t bytes = w.temp_bytes;
  VLM_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(w.temp, bytes, col, w.top_keys, w.idx_in,
                                                                    w.idx_out, H * N, H, w.seg, w.seg + H,
                                                                    0, 64, stream));
  const int smem = (kTop + kTop / 2 + 4 * sh.max_cand) * int(sizeof(double));
  static const bool ok = allow_dynamic_smem(cand_scores_kernel, (kTop + kTop / 2 + 4 * 4096) * int(sizeof(double)));
  (void)ok;
  cand_scores_kernel<<<dim3(H, (sh.num_cands + 3) / 4), 128, smem, stream>>>(slash, w.top_keys, w.idx_out, w.totals,
                                                                            cands, sh, w.cand_scores);
  VLM_CUDA_CHECK_LAUNCH();
  choose_kernel<<<H, 32, 0, stream>>>(w.cand_scores, cands, known, sh, strides, scores);
  VLM_CUDA_CHECK_LAUNCH();
}

void grid_layouts_from_phase(const double* phase_mass, int max_stride, const int32_t* strides, const double* scores,
                             const GridChoiceShape& sh, DeviceGridLayout* layouts, cudaStream_t stream) {
  layout_kernel<<<sh.num_heads, 32, 0, stream>>>(phase_mass, max_stride, strides, scores, sh, layouts);
  VLM_CUDA_CHECK_LAUNCH();
}

void grid_last_q_probs(const void* q, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                       const GridEstimateShape& sh, float scale, float* probs, cudaStream_t stream) {
  VLM_CHECK(sh.rows > 0 && sh.rows <= kRows && sh.rows <= sh.q_len && sh.q_len <= sh.num_keys,
            "grid estimate: {} rows of a {}-row chunk over {} keys", sh.rows, sh.q_len, sh.num_keys);
  VLM_CHECK((kv.block_size & (kv.block_size - 1)) == 0 && kv.head_dim <= 128 && kv.head_dim % 4 == 0 && sh.num_heads % kv.num_kv_heads == 0,
            "grid estimate: block size {} D {} H {} Hkv {}", kv.block_size, kv.head_dim, sh.num_heads, kv.num_kv_heads);
  const int smem = (kRows * kv.head_dim + kKeys * (kv.head_dim + 1)) * int(sizeof(float));
  static const bool smem_ok = allow_dynamic_smem(scores_kernel, kRows * 128 * 4 + kKeys * 129 * 4);
  (void)smem_ok;
  scores_kernel<<<dim3((sh.num_keys + kKeys - 1) / kKeys, sh.num_heads), kThreads, smem, stream>>>(
      q, act, kv_view(kv), kv.dtype, block_table, sh, scale, probs);
  VLM_CUDA_CHECK_LAUNCH();
  softmax_kernel<<<dim3(sh.rows, sh.num_heads), kThreads, 0, stream>>>(sh, probs);
  VLM_CUDA_CHECK_LAUNCH();
}

void grid_line_sums(const float* probs, const GridEstimateShape& sh, double* col, double* slash, cudaStream_t stream) {
  sums_kernel<<<dim3((sh.num_keys + kThreads - 1) / kThreads, sh.num_heads), kThreads, 0, stream>>>(probs, sh, col,
                                                                                                   slash);
  VLM_CUDA_CHECK_LAUNCH();
}

void grid_phase_mass(const float* probs, const GridEstimateShape& sh, const int32_t* strides, int max_stride, int band,
                     int n_init, double* pm, cudaStream_t stream) {
  VLM_CHECK(max_stride >= 1 && max_stride <= 4096, "grid phase mass: max stride {}", max_stride);
  VLM_CUDA_CHECK(cudaMemsetAsync(pm, 0, size_t(sh.num_heads) * max_stride * sizeof(double), stream));
  phase_kernel<<<dim3((sh.num_keys + kThreads - 1) / kThreads, sh.num_heads), kThreads, 0, stream>>>(
      probs, sh, strides, max_stride, band, n_init, pm);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
