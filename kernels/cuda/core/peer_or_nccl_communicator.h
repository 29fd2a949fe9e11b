// PeerOrNcclCommunicator: tensor parallelism's Communicator on the GPUs of one process, which
// all-reduces small messages with PeerAllReduce (kernels/cuda/core/peer_all_reduce.h, one-shot over
// peer access) and everything else (larger messages, all_gather) with NCCL (issue 42).
//
// The choice, read once at start from the environment:
//   VLM_TP_ALLREDUCE = auto (default): the peer all-reduce up to the threshold where every pair of
//                      GPUs has peer access, NCCL only where it has not;
//                      peer: the same, but refused at start (DeviceError) without peer access;
//                      nccl: NCCL for every message.
//   VLM_TP_ALLREDUCE_MAX_BYTES = the largest message the peer all-reduce takes (default 1 MiB: a
//                      decode step of 64 sequences of a 8192-wide model in bf16); larger ones go
//                      to NCCL. Each GPU holds 2 x this in staging.
// The choice depends only on the message's count and dtype, so every rank takes the same path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/communicator.h"
#include "kernels/cuda/core/peer_all_reduce.h"

namespace vlm::cuda {

enum class AllReduceMode { kAuto, kPeer, kNccl };

struct AllReduceChoice {
  AllReduceMode mode = AllReduceMode::kAuto;
  size_t max_bytes = size_t{1} << 20;
};

// From VLM_TP_ALLREDUCE and VLM_TP_ALLREDUCE_MAX_BYTES (above); LoadError naming the variable for
// a value that is not one of those (or not a positive integer).
AllReduceChoice all_reduce_choice_from_env();
const char* all_reduce_mode_name(AllReduceMode m);

// The group's peer all-reduce for `choice` over `devices`: null for kNccl, and for kAuto where peer
// access is not possible (logged); DeviceError for kPeer there.
std::shared_ptr<PeerAllReduce> make_peer_all_reduce(const std::vector<int>& devices, const AllReduceChoice& choice);

class PeerOrNcclCommunicator final : public Communicator {
 public:
  // nccl: this rank's NCCL communicator (owned); peer: the group's, or null (then NCCL only).
  PeerOrNcclCommunicator(std::unique_ptr<Communicator> nccl, std::shared_ptr<PeerAllReduce> peer);
  int rank() const override { return nccl_->rank(); }
  int size() const override { return nccl_->size(); }
  // The peer all-reduce where it accepts (count, dtype), NCCL otherwise; `stream` a cudaStream_t.
  void all_reduce_sum(void* buf, int64_t count, DType dtype, void* stream) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype, void* stream) override;
  // Calls made through each path (host-side counts of enqueued calls, for tests and logs).
  int64_t peer_calls() const { return peer_calls_; }
  int64_t nccl_calls() const { return nccl_calls_; }

 private:
  std::unique_ptr<Communicator> nccl_;
  std::shared_ptr<PeerAllReduce> peer_;
  int64_t peer_calls_ = 0;
  int64_t nccl_calls_ = 0;
};

}  // namespace vlm::cuda
