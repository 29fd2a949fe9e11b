// vertical_slash_plan.cuh's kernels. One thread walks the slashes of its (head, query block) in
// descending offset (ascending range end) order, merging ranges as vertical_slash_head_plan does,
// and the verticals beside them: each closed range first passes the verticals below its end
// (those below its start become gathered columns), then lists its key blocks.
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/sparse_prefill/vertical_slash_plan.cuh"

namespace vlm::cuda {
namespace {

constexpr int kBlock = 64;
constexpr int kThreads = 128;

// Walks (h, m); emit_block(k0) / emit_col(j) in the plan's order.
template <class Block, class Col>
__device__ void walk(const VerticalSlashLists& L, const VerticalSlashPlanShape& sh, int h, int m, Block emit_block,
                     Col emit_col) {
  const int N = sh.num_keys, off = N - sh.q_len;
  const int lim = off + (m + 1) * kBlock, causal_end = off + min(sh.q_len, (m + 1) * kBlock);
  const int vlim = min(lim, causal_end);
  const int32_t* vert = L.lists + L.vbegin[h];
  const int nv = static_cast<int>(L.vcount[h]);
  const int32_t* sl = L.lists + L.sbegin[h];
  int vi = 0;
  auto flush = [&](int rs, int re) {
    for (; vi < nv && vert[vi] < vlim && vert[vi] < re; ++vi)
      if (vert[vi] < rs) emit_col(vert[vi]);
    for (int k0 = rs; k0 < re && k0 < causal_end; k0 += kBlock) emit_block(k0);
  };
  int rs = 0, re = -1;
  for (int i = static_cast<int>(L.scount[h]) - 1; i >= 0; --i) {  // descending offsets
    const int o = sl[i];
    if (o >= lim) continue;
    const int e = max(lim - o, kBlock);
    if (re < 0) {
      rs = e - kBlock, re = e;
    } else if (e > re + kBlock) {
      flush(rs, re);
      rs = e - kBlock, re = e;
    } else if (e > re) {
      re += kBlock;
    }
  }
  if (re >= 0) flush(rs, re);
  for (; vi < nv && vert[vi] < vlim; ++vi) emit_col(vert[vi]);
}

__global__ void count_kernel(VerticalSlashLists L, VerticalSlashPlanShape sh, int32_t* nblocks, int32_t* ncols,
                             int32_t* unaligned) {
  const int nqb = sh.num_qblocks(), i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= sh.num_heads * nqb) return;
  int nb = 0, nc = 0, odd = 0;
  walk(L, sh, i / nqb, i % nqb, [&](int k0) { ++nb, odd |= k0 & (kBlock - 1); }, [&](int) { ++nc; });
  nblocks[i] = nb;
  ncols[i] = nc;
  if (odd) atomicOr(unaligned + i / nqb, 1);
}

__global__ void fill_kernel(VerticalSlashLists L, VerticalSlashPlanShape sh, VerticalSlashPlanOut out) {
  const int nqb = sh.num_qblocks(), i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= sh.num_heads * nqb) return;
  const int h = i / nqb, m = i % nqb;
  const int bo = out.block_off[i], co = out.col_off[i];
  int32_t* blocks = out.data + out.blocks_base + bo;
  int32_t* cols = out.data + out.cols_base + co;
  int nb = 0, nc = 0;
  walk(L, sh, h, m, [&](int k0) { blocks[nb++] = k0; }, [&](int j) { cols[nc++] = j; });
  int32_t* bptr = out.data + out.ptr_base + int64_t(h) * 2 * (nqb + 1);
  int32_t* cptr = bptr + nqb + 1;
  bptr[m] = bo;
  cptr[m] = co;
  if (m == nqb - 1) bptr[nqb] = bo + nb, cptr[nqb] = co + nc;
}

}  // namespace

void vertical_slash_plan_count(const VerticalSlashLists& lists, const VerticalSlashPlanShape& sh, int32_t* nblocks,
                               int32_t* ncols, int32_t* unaligned, cudaStream_t stream) {
  const int n = sh.num_heads * sh.num_qblocks();
  count_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(lists, sh, nblocks, ncols, unaligned);
  VLM_CUDA_CHECK_LAUNCH();
}

void vertical_slash_plan_fill(const VerticalSlashLists& lists, const VerticalSlashPlanShape& sh,
                              const VerticalSlashPlanOut& out, cudaStream_t stream) {
  const int n = sh.num_heads * sh.num_qblocks();
  fill_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(lists, sh, out);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
