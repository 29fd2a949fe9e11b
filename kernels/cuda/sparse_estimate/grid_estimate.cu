// The grid search's device kernels (grid_estimate.cuh): last-query scores (f32 FMA, keys and
// query rows staged in shared memory), row softmax, line sums and phase masses. Plain CUDA cores:
// R = 64 rows per head is a small GEMM next to the attention it plans.
#include <cuda_runtime.h>

#include <cmath>

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

// Grid (ceil(N / kKeys), H). probs[h][r][j] = scale * q_r . k_j, or -inf past pos_r (k_j as it
// represents: an F8_E4M3 cache's byte times the head's k_scale; 16-bit caches read as before).
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
    ks[jj * (D + 1) + d] = j < N ? load_kv_f32(kv, kv_dtype, false, hk, kv.token_offset(table, hk, j) + d) : 0.f;
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

}  // namespace

void grid_last_q_probs(const void* q, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                       const GridEstimateShape& sh, float scale, float* probs, cudaStream_t stream) {
  VLM_CHECK(sh.rows > 0 && sh.rows <= kRows && sh.rows <= sh.q_len && sh.q_len <= sh.num_keys,
            "grid estimate: {} rows of a {}-row chunk over {} keys", sh.rows, sh.q_len, sh.num_keys);
  VLM_CHECK((kv.block_size & (kv.block_size - 1)) == 0 && kv.head_dim <= 128 && kv.head_dim % 4 == 0 && sh.num_heads % kv.num_kv_heads == 0,
            "grid estimate: block size {} D {} H {} Hkv {}", kv.block_size, kv.head_dim, sh.num_heads, kv.num_kv_heads);
  const int smem = (kRows * kv.head_dim + kKeys * (kv.head_dim + 1)) * int(sizeof(float));
  const bool smem_ok = allow_dynamic_smem(scores_kernel, kRows * 128 * 4 + kKeys * 129 * 4);
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
