// The GPU's Collective (tensor parallelism, issue 42): the Communicator's collectives (NCCL:
// kernels/cuda/core/nccl_communicator.h) enqueued on the step's stream, so a decode step's
// all-reduces are captured in its CUDA graph like its kernels. The rank's device must be current.
#pragma once

#include <memory>

#include "kernels/core/communicator.h"
#include "model/layers/layers.h"

namespace vlm {

std::unique_ptr<Collective> make_cuda_collective(Communicator& comm);

}  // namespace vlm
