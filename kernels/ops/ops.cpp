// Element-wise and row-wise decoder ops (kernels/ops/ops.h): argument checks, splitting over the
// global thread pool when the work is large enough, and the vectorized row kernels of
// kernels/ops/row_kernels.h for the arithmetic.
#include "kernels/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/dtype.h"
#include "kernels/ops/row_kernels.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

// Below this many elements per task, a thread-pool hand-off costs more than it saves.
constexpr int64_t kMinElemsPerTask = 32 * 1024;

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Calls fn(row_begin, row_end) over [0, rows), in parallel when rows * row_elems is large.
template <typename Fn>
void for_rows(int64_t rows, int64_t row_elems, const Fn& fn) {
  if (rows <= 0) return;
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(1, row_elems));
  if (rows <= grain) {
    fn(int64_t{0}, rows);
    return;
  }
  global_thread_pool().parallel_for(rows, fn, grain);
}

// Calls fn(begin, end) over [0, n) of a flat element-wise op, in parallel when n is large.
template <typename Fn>
void for_elems(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (n <= kMinElemsPerTask) {
    fn(int64_t{0}, n);
    return;
  }
  global_thread_pool().parallel_for(n, fn, kMinElemsPerTask);
}

}  // namespace

void rms_norm(const float* x, const TensorView& w, float eps, int64_t T, float* y) {
  VLM_CHECK(w.ndim() == 1, "rms_norm weight must be 1-D, got {}", w.shape.str());
  VLM_CHECK(is_float_dtype(w.dtype), "rms_norm weight dtype {}", dtype_name(w.dtype));
  VLM_CHECK(T >= 0, "rms_norm T={}", T);
  const int64_t C = w.dim(0);
  if (T == 0 || C == 0) return;

  std::vector<float> w_f32;
  const float* wp = static_cast<const float*>(w.data);
  if (w.dtype != DType::F32) {
    w_f32.resize(static_cast<size_t>(C));
    convert_to_f32(w.data, w.dtype, w_f32.data(), C);
    wp = w_f32.data();
  }

  const RowKernels& k = row_kernels();
  for_rows(T, C, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * C;
      // HF: variance = mean(x^2) in f32; x * rsqrt(variance + eps) (f32 rsqrt = 1 / sqrt).
      const float var = static_cast<float>(k.sum_squares(xr, C) / static_cast<double>(C));
      const float r = 1.0f / std::sqrt(var + eps);
      k.scale_mul(xr, r, wp, y + t * C, C);
    }
  });
}

void silu_mul(const float* gate, const float* up, int64_t T, int64_t I, float* out) {
  VLM_CHECK(T >= 0 && I >= 0, "silu_mul T={} I={}", T, I);
  const RowKernels& k = row_kernels();
  // Element-wise over the contiguous [T, I] block: split it flat, not by rows.
  for_elems(T * I, [&](int64_t b, int64_t e) { k.silu_mul(gate + b, up + b, out + b, e - b); });
}

void softmax_rows(float* x, int64_t rows, int64_t n) {
  VLM_CHECK(rows >= 0 && n >= 0, "softmax_rows rows={} n={}", rows, n);
  if (n == 0) return;
  const RowKernels& k = row_kernels();
  for_rows(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) k.softmax(x + r * n, n);
  });
}

void block_max(const float* x, int64_t n, int64_t block, float* out) {
  VLM_CHECK(n >= 0 && block >= 1, "block_max n={} block={}", n, block);
  row_kernels().block_max(x, n, block, out);
}

double exp_sum(const float* x, int64_t n, float s, float m, float* y) {
  VLM_CHECK(n >= 0 && std::isfinite(m) && s > 0.0f, "exp_sum n={} s={} m={}", n, s, m);
  return row_kernels().exp_sum(x, n, s, m, y);
}

void add_inplace(float* y, const float* x, int64_t n) {
  VLM_CHECK(n >= 0, "add_inplace n={}", n);
  const RowKernels& k = row_kernels();
  for_elems(n, [&](int64_t b, int64_t e) { k.add(y + b, x + b, e - b); });
}

void embedding_lookup(const TensorView& table, const int32_t* ids, int64_t T, float* out) {
  VLM_CHECK(table.ndim() == 2, "embedding table must be 2-D, got {}", table.shape.str());
  VLM_CHECK(is_float_dtype(table.dtype), "embedding table dtype {}", dtype_name(table.dtype));
  VLM_CHECK(T >= 0, "embedding_lookup T={}", T);
  const int64_t V = table.dim(0), C = table.dim(1);
  // Check every id before writing anything.
  for (int64_t t = 0; t < T; ++t) {
    VLM_CHECK(ids[t] >= 0 && ids[t] < V, "token id {} at t={} outside the table's {} rows",
              ids[t], t, V);
  }
  const size_t row_bytes = static_cast<size_t>(C) * dtype_size(table.dtype);
  const char* base = static_cast<const char*>(table.data);
  for_rows(T, C, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      convert_to_f32(base + static_cast<size_t>(ids[t]) * row_bytes, table.dtype, out + t * C, C);
  });
}

}  // namespace vlm
