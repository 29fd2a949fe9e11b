// The two paths behind linear() (kernels/gemm/gemm.h), exposed for tests and benchmarks; model code
// calls linear(). Same preconditions as linear(), checked there, not here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/core/tensor.h"
#include "kernels/core/thread_pool.h"
#include "kernels/gemm/gemm.h"

namespace vlm::gemm_detail {

// How the streaming kernels (small-M, bf16 GEMV) cut one W [N, K] over pool tasks: tasks of
// contiguous rows (at least min_rows, min_elems weights, to amortize the hand-off; at most
// rows_per_task, tasks_per_thread per thread; multiples of 8 rows), and inside a task blocks of
// ~128 KB of W that stay in L2 while every row group of x passes over them, so W is read from
// memory once for any M.
struct RowSplit {
  int64_t rows_per_task = 0;
  int64_t block_rows = 0;
  int64_t min_rows = 0;
};
RowSplit plan_row_split(int64_t N, int64_t K, int64_t esize, int64_t min_elems, int64_t tasks_per_thread,
                        int num_threads);

// One W's rows [n0, n1) as one pool task.
struct RowTask {
  int64_t target, n0, n1;
};
// The tasks of one job over every target (splits[i] for targets[i]), guided: a task takes a
// 1/(2 * num_threads) share of the rows not yet given out over all targets, clamped to
// [min_rows, rows_per_task] and to its target's end, so the tasks shrink toward the end of the
// job and the threads finish it together (with equal tasks, one thread could wait up to a whole
// task, ~1 ms on the LM head's 34 MB tasks). Tasks are claimed in order (about largest first).
void plan_row_tasks(std::span<const LinearTarget> targets, const RowSplit* splits, int num_threads,
                    std::vector<RowTask>& tasks);

// One pool job over every target's tasks (plan_row_tasks):
// block(i, n0, n1) for each block [n0, n1) of W rows of each task.
template <class Block>
void run_row_blocks(std::span<const LinearTarget> targets, const RowSplit* splits, Block&& block) {
  ThreadPool& pool = global_thread_pool();
  std::vector<RowTask> tasks;
  plan_row_tasks(targets, splits, pool.num_threads(), tasks);
  pool.run_tasks(static_cast<int64_t>(tasks.size()), [&](int64_t task) {
    const RowTask& t = tasks[static_cast<size_t>(task)];
    const int64_t step = splits[t.target].block_rows;
    for (int64_t n0 = t.n0; n0 < t.n1; n0 += step) block(static_cast<size_t>(t.target), n0, std::min(t.n1, n0 + step));
  });
}

// Rows of x handled together by one pass of the small-M kernel over a block of W (larger M runs
// several passes over each L2-resident block): the default and the largest supported.
constexpr int64_t kDefaultRowGroup = 4;
constexpr int64_t kMaxRowGroup = 8;

// Streaming kernel: reads every weight row once from memory (converting 16-bit W to f32 in
// registers) for groups of up to kMaxRowGroup rows of x (an L2-sized block of W rows serves all
// groups before the next block); parallel over N. row_group = 0 picks kDefaultRowGroup.
// AVX-512 when use_avx512(), portable code otherwise. Any M >= 1, K >= 1.
void linear_small_m(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                    const float* bias /*[N] or null*/, float* y /*[M,N]*/, int64_t row_group = 0);
// The same for several W of one K and dtype in one pool job (x converted once).
void linear_small_m_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets,
                          int64_t row_group = 0);

// OpenBLAS sgemm over N-panels of W, one panel per pool task. A 16-bit panel is first converted
// into a thread-local f32 buffer of panel_rows * K floats (<= 256 rows, ~4 MB); panel_rows = 0
// picks the size from N, K, the dtype and the thread count. F32 W is never copied. Any M, K >= 1.
void linear_blas(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                 const float* bias /*[N] or null*/, float* y /*[M,N]*/, int64_t panel_rows = 0);

// bf16 dot-product path (kernels/gemm/gemm_bf16.cpp), BF16 W only: x is rounded to bf16 once per call
// (round to nearest even), products are summed in f32 by vdpbf16ps over packed, cache-blocked
// tiles, parallel over column blocks of W. Needs bf16_dot_supported(). Any M, K >= 1.
// chunk_pairs > 0 caps the K chunk (in bf16 pairs, rounded up to 16) for tests; 0 sizes it for L2.
bool bf16_dot_supported();  // use_avx512() and the CPU has AVX512-BF16
// The checks both bf16 kernels make on their arguments: AVX512-BF16 present, every W BF16 with
// the first W's K; returns that K. `kernel` names the caller in the messages. targets non-empty.
int64_t bf16_targets_k(std::span<const LinearTarget> targets, const char* kernel);
void linear_bf16_dot(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                     const float* bias /*[N] or null*/, float* y /*[M,N]*/,
                     int64_t chunk_pairs = 0);
// The same for several BF16 W of one K in one pool job (x packed once).
void linear_bf16_dot_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets,
                           int64_t chunk_pairs = 0);
// bf16 GEMV path (kernels/gemm/gemv_bf16.cpp) for few rows of x (decode), BF16 W only: x rounded to
// bf16 once per call (as linear_bf16_dot does), each output a vdpbf16ps dot product of an x row and
// a W row in W's stored layout (no packing), the next W rows prefetched into L2; parallel over N.
// Needs bf16_dot_supported(). Any M, K >= 1 (meant for M < kBf16DotMinM). Same reference as below.
void linear_gemv_bf16(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                      const float* bias /*[N] or null*/, float* y /*[M,N]*/);
void linear_gemv_bf16_multi(const float* x /*[M,K]*/, int64_t M, std::span<const LinearTarget> targets);
// Its naive reference: y = bf16(x) · W^T (+ bias) with double accumulation, bf16(x) rounded to
// nearest even as f32_to_bf16 does. BF16 W only.
void linear_bf16_ref(const float* x /*[M,K]*/, int64_t M, const TensorView& W /*[N,K]*/,
                     const float* bias /*[N] or null*/, float* y /*[M,N]*/);

}  // namespace vlm::gemm_detail
