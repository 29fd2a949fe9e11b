// Communicator: the collectives of tensor parallelism among the N ranks of one group (issue 42).
// Rank r of N holds its own buffers; a collective is called by every rank of the group, in the
// same order, with the same count and dtype (a rank that skips one leaves the others waiting).
// `stream` is the backend's queue the collective is ordered on (a cudaStream_t for NCCL, whose
// calls are then capturable in CUDA graphs; ignored by the CPU's ThreadCommunicator, which runs
// it on the calling thread). Implementations: ThreadCommunicator (kernels/core/, N threads of one
// process), NcclCommunicator (kernels/cuda/core/nccl_communicator.h, one GPU per rank).
#pragma once

#include <cstdint>

#include "kernels/core/dtype.h"

namespace vlm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf[i] = sum over ranks of buf[i], for i < count; in place. dtype: F32, BF16 or F16.
  virtual void all_reduce_sum(void* buf, int64_t count, DType dtype, void* stream) = 0;
  // out [size * count] = rank 0's in [count], then rank 1's, ...; in and out must not overlap.
  virtual void all_gather(const void* in, void* out, int64_t count, DType dtype, void* stream) = 0;
};

}  // namespace vlm
