// linear(): the checks, the choice of path, the OpenBLAS panel path and the naive reference.
// The small-M streaming kernel lives in gemm_small_m.cpp.
#include "kernels/gemm/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "kernels/core/check.h"
#include "kernels/core/cpu_features.h"
#include "kernels/gemm/gemm_internal.h"
#include "kernels/core/thread_pool.h"

namespace vlm {

namespace {

void check_linear_args(const float* x, int64_t M, const TensorView& W, const float* bias,
                       float* y) {
  VLM_CHECK(W.ndim() == 2, "linear: W must be 2-D [N, K], got {}", W.shape.str());
  VLM_CHECK(W.dtype == DType::F32 || W.dtype == DType::BF16 || W.dtype == DType::F16,
            "linear: W dtype {} (want F32, BF16 or F16)", dtype_name(W.dtype));
  VLM_CHECK(M >= 0, "linear: M = {}", M);
  const int64_t N = W.dim(0), K = W.dim(1);
  VLM_CHECK(N >= 0 && K >= 0, "linear: W shape {}", W.shape.str());
  if (M == 0 || N == 0) return;
  VLM_CHECK(y != nullptr, "linear: y is null (M={}, N={})", M, N);
  if (K == 0) return;
  VLM_CHECK(x != nullptr && W.data != nullptr, "linear: null x or W (M={}, K={})", M, K);
  const auto xb = reinterpret_cast<uintptr_t>(x), yb = reinterpret_cast<uintptr_t>(y);
  const auto xe = xb + static_cast<uintptr_t>(M * K) * sizeof(float);
  const auto ye = yb + static_cast<uintptr_t>(M * N) * sizeof(float);
  VLM_CHECK(ye <= xb || xe <= yb, "linear: y [M={}, N={}] overlaps x [M={}, K={}]", M, N, M, K);
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// A per-thread f32 scratch buffer of at least `floats` elements, 64-byte aligned, kept for
// later calls (its size is bounded by the largest panel: panel_rows * K floats).
float* thread_panel_buffer(int64_t floats) {
  thread_local std::unique_ptr<float, FreeDeleter> buf;
  thread_local int64_t capacity = 0;
  if (floats > capacity) {
    const size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64;
    buf.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    capacity = 0;
    if (!buf) throw std::bad_alloc();
    capacity = floats;
  }
  return buf.get();
}

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Rows per N-panel. 16-bit W: the f32 panel (rows * K floats) is at most ~4 MB, since OpenBLAS
// packs all of x once per sgemm call, fewer, larger panels are cheaper for large M. F32 W:
// one panel per thread. Always at least one panel per thread when N allows.
int64_t auto_panel_rows(int64_t N, int64_t K, DType dt, int num_threads) {
  const int64_t per_thread = round_up((N + num_threads - 1) / num_threads, 16);
  if (dt == DType::F32) return std::max<int64_t>(16, per_thread);
  constexpr int64_t kPanelFloats = int64_t{1} << 20;
  const int64_t rows = std::clamp<int64_t>(kPanelFloats / K / 16 * 16, 16, 256);
  return std::max<int64_t>(16, std::min(rows, per_thread));
}

}  // namespace

namespace gemm_detail {

void linear_blas(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                 const float* bias /*[N] or null*/, float* y /*[M,N]*/, int64_t panel_rows) {
  const int64_t N = W.dim(0), K = W.dim(1);
  const DType dt = W.dtype;
  ThreadPool& pool = global_thread_pool();
  const int64_t rows = panel_rows > 0 ? panel_rows : auto_panel_rows(N, K, dt, pool.num_threads());
  const int64_t num_panels = (N + rows - 1) / rows;
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));

  pool.run_tasks(num_panels, [&](int64_t p) {
    const int64_t n0 = p * rows, nb = std::min(rows, N - n0);
    const void* w_src = static_cast<const char*>(W.data) + n0 * K * esize;
    const float* w_panel /*[nb,K]*/ = static_cast<const float*>(w_src);
    if (dt != DType::F32) {
      float* buf = thread_panel_buffer(nb * K);
      convert_to_f32(w_src, dt, buf, nb * K);  // the panel's rows are contiguous in W
      w_panel = buf;
    }
    // y[:, n0:n0+nb] = x · w_panel^T (row-major, ldc = N)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(M),
                static_cast<blasint>(nb), static_cast<blasint>(K), 1.0f, x,
                static_cast<blasint>(K), w_panel, static_cast<blasint>(K), 0.0f, y + n0,
                static_cast<blasint>(N));
    if (bias)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n0 + nb; ++n) y[m * N + n] += bias[n];
  });
}

RowSplit plan_row_split(int64_t N, int64_t K, int64_t esize, int64_t min_elems, int64_t tasks_per_thread,
                        int num_threads) {
  RowSplit p;
  const int64_t min_rows = std::max<int64_t>(8, (min_elems + K - 1) / K);
  const int64_t max_tasks = tasks_per_thread * static_cast<int64_t>(num_threads);
  p.rows_per_task = std::max(min_rows, (N + max_tasks - 1) / max_tasks);
  p.rows_per_task = (p.rows_per_task + 7) / 8 * 8;
  p.block_rows = std::max<int64_t>(8, (131072 / (K * esize)) / 8 * 8);
  p.min_rows = (min_rows + 7) / 8 * 8;
  return p;
}

void plan_row_tasks(std::span<const LinearTarget> targets, const RowSplit* splits, int num_threads,
                    std::vector<RowTask>& tasks) {
  tasks.clear();
  int64_t left = 0;
  for (const LinearTarget& t : targets) left += t.W->dim(0);
  const int64_t share = 2 * std::max(1, num_threads);
  for (size_t i = 0; i < targets.size(); ++i) {
    const int64_t N = targets[i].W->dim(0);
    const RowSplit& p = splits[i];
    for (int64_t n0 = 0; n0 < N;) {
      int64_t rows = (left / share + 7) / 8 * 8;
      rows = std::clamp(rows, std::min(p.min_rows, p.rows_per_task), p.rows_per_task);
      const int64_t n1 = std::min(N, n0 + rows);
      tasks.push_back({static_cast<int64_t>(i), n0, n1});
      left -= n1 - n0;
      n0 = n1;
    }
  }
}

}  // namespace gemm_detail

namespace {
std::atomic<bool> g_bf16_activations{false};
}  // namespace

void set_bf16_activations(bool enabled) { g_bf16_activations.store(enabled); }
bool bf16_activations() { return g_bf16_activations.load(std::memory_order_relaxed); }

bool uses_bf16_dot(DType w_dtype, int64_t M) {
  return w_dtype == DType::BF16 && M >= kBf16DotMinM && bf16_activations() &&
         gemm_detail::bf16_dot_supported();
}

bool uses_bf16_gemv(DType w_dtype, int64_t M) {
  return w_dtype == DType::BF16 && M < kBf16DotMinM && bf16_activations() && gemm_detail::bf16_dot_supported();
}

int64_t small_m_limit(DType w_dtype) {
  if (!use_avx512()) return kSmallMPortable;
  return w_dtype == DType::F32 ? kSmallM : kSmallM16Bit;
}

void linear(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
            const float* bias /*[N] or null*/, float* y /*[M,N]*/) {
  check_linear_args(x, M, W, bias, y);
  const int64_t N = W.dim(0), K = W.dim(1);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] = bias ? bias[n] : 0.0f;
    return;
  }
  if (uses_bf16_dot(W.dtype, M))
    gemm_detail::linear_bf16_dot(x, M, W, bias, y);
  else if (uses_bf16_gemv(W.dtype, M))
    gemm_detail::linear_gemv_bf16(x, M, W, bias, y);
  else if (M <= small_m_limit(W.dtype))
    gemm_detail::linear_small_m(x, M, W, bias, y);
  else
    gemm_detail::linear_blas(x, M, W, bias, y);
}

void linear_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets) {
  if (targets.empty()) return;
  const TensorView& W0 = *targets[0].W;
  bool same = W0.ndim() == 2;
  for (const LinearTarget& t : targets) {
    check_linear_args(x, M, *t.W, t.bias, t.y);
    same = same && t.W->dtype == W0.dtype && t.W->dim(1) == W0.dim(1) && t.W->dim(0) > 0;
  }
  if (M == 0) return;
  if (same && W0.dim(1) > 0) {
    if (uses_bf16_dot(W0.dtype, M)) return gemm_detail::linear_bf16_dot_multi(x, M, targets);
    if (uses_bf16_gemv(W0.dtype, M)) return gemm_detail::linear_gemv_bf16_multi(x, M, targets);
    if (M <= small_m_limit(W0.dtype)) return gemm_detail::linear_small_m_multi(x, M, targets);
  }
  for (const LinearTarget& t : targets) linear(x, M, *t.W, t.bias, t.y);
}

void linear_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                const float* bias /*[N] or null*/, float* y /*[M,N]*/) {
  check_linear_args(x, M, W, bias, y);
  const int64_t N = W.dim(0), K = W.dim(1);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(x[m * K + k]) *
               static_cast<double>(load_as_f32(W.data, W.dtype, n * K + k));
      y[m * N + n] = static_cast<float>(acc);
    }
}

}  // namespace vlm
