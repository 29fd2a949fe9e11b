// NCCL loaded at run time (dlopen), so that the binaries need no libnccl to start; the
// Communicator of GPU tensor parallelism (one process, one host thread and one GPU per rank).
//
// Search order for libnccl.so.2: $VLM_NCCL_LIBRARY (a file or a directory), the dynamic loader's
// path (LD_LIBRARY_PATH, ldconfig: "libnccl.so.2"), then site-packages/nvidia/nccl/lib of the usual
// Python prefixes and of `python3` on PATH (a stock CUDA + PyTorch image carries it there). Only
// the types of nccl.h are used, declared here with their ABI (nccl_communicator.cpp checks them
// against nccl.h where the build machine has it).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/communicator.h"

namespace vlm::cuda {

// The NCCL entry points used, with nccl.h's ABI: ncclResult_t is an int enum (0 = ncclSuccess),
// ncclComm_t an opaque pointer, ncclUniqueId 128 bytes, ncclDataType_t / ncclRedOp_t int enums
// (ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9; ncclSum = 0), cudaStream_t a pointer.
struct NcclApi {
  using Result = int;
  using Comm = void*;
  struct UniqueId {
    char internal[128];
  };
  Result (*GetVersion)(int*) = nullptr;
  const char* (*GetErrorString)(Result) = nullptr;
  Result (*GetUniqueId)(UniqueId*) = nullptr;
  Result (*CommInitRank)(Comm*, int nranks, UniqueId id, int rank) = nullptr;
  Result (*CommInitAll)(Comm*, int ndev, const int* devlist) = nullptr;
  Result (*CommDestroy)(Comm) = nullptr;
  Result (*AllReduce)(const void* send, void* recv, size_t count, int dtype, int op, Comm, void* stream) = nullptr;
  Result (*AllGather)(const void* send, void* recv, size_t sendcount, int dtype, Comm, void* stream) = nullptr;
  int version = 0;  // e.g. 22807 for 2.28.7
};

// The process-wide NCCL, loaded on first call (thread-safe). Null when not found; *why then lists
// every place looked in. `where` receives the path loaded from.
const NcclApi* nccl_api(std::string* why = nullptr, std::string* where = nullptr);

// The communicators of one group: rank r on device devices[r], all made at once
// (ncclCommInitAll, from the calling thread). Throws LoadError when NCCL is not found (naming where
// it looked) and DeviceError when NCCL fails to set the group up.
class NcclGroup {
 public:
  explicit NcclGroup(const std::vector<int>& devices);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  int size() const { return static_cast<int>(comms_.size()); }
  int device(int rank) const { return devices_.at(static_cast<size_t>(rank)); }
  NcclApi::Comm comm(int rank) const { return comms_.at(static_cast<size_t>(rank)); }
  const NcclApi& api() const { return *api_; }

 private:
  const NcclApi* api_ = nullptr;
  std::vector<int> devices_;
  std::vector<NcclApi::Comm> comms_;
};

// Rank r of a NcclGroup. Collectives are enqueued on `stream` (a cudaStream_t of the rank's
// device; capturable in CUDA graphs, NCCL >= 2.9); the caller's thread must have the rank's device
// current. A failed NCCL call throws DeviceError naming it.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(void* buf, int64_t count, DType dtype, void* stream) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype, void* stream) override;

 private:
  std::shared_ptr<NcclGroup> group_;
  int rank_;
};

}  // namespace vlm::cuda
