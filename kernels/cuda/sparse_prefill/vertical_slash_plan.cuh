// Device half of CudaVerticalSlashPlan (cuda_vertical_slash_plan.h): vertical_slash_head_plan
// (kernels/sparse_prefill/vertical_slash.h) of every query head of one sequence's chunk, one
// thread per (head, 64-row query block), from the device lists of CudaVerticalSlash. Plain C++17.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace vlm::cuda {

struct VerticalSlashPlanShape {
  int num_heads = 0, q_len = 0, num_keys = 0;
  constexpr int num_qblocks() const { return (q_len + 63) / 64; }
};

// The lists of head h: lists + vbegin[h] (vcount[h] verticals, ascending) and lists + sbegin[h]
// (scount[h] slashes, ASCENDING: walked from the end). Device arrays.
struct VerticalSlashLists {
  const int32_t* lists = nullptr;
  const int64_t* vbegin = nullptr;
  const int64_t* vcount = nullptr;
  const int64_t* sbegin = nullptr;
  const int64_t* scount = nullptr;
};

// Pass 1: nblocks[H, nqb], ncols[H, nqb] = the key blocks and gathered columns of each (head,
// query block); unaligned[h] |= 1 when head h lists a key block not starting at a multiple of 64
// (zeroed by the caller).
void vertical_slash_plan_count(const VerticalSlashLists& lists, const VerticalSlashPlanShape& shape, int32_t* nblocks,
                               int32_t* ncols, int32_t* unaligned /*[H]*/, cudaStream_t stream);

// Pass 2 at the exclusive sums of pass 1 (block_off, col_off [H * nqb]): blocks at data +
// blocks_base + block_off[hm], columns at data + cols_base + col_off[hm]; the pointers (absolute
// into the lists of all heads) of head h at data + ptr_base + h * 2 * (nqb + 1) (block_ptr, then
// col_ptr).
struct VerticalSlashPlanOut {
  int32_t* data;
  int64_t ptr_base, blocks_base, cols_base;
  const int32_t* block_off;
  const int32_t* col_off;
};
void vertical_slash_plan_fill(const VerticalSlashLists& lists, const VerticalSlashPlanShape& shape,
                              const VerticalSlashPlanOut& out, cudaStream_t stream);

}  // namespace vlm::cuda
