// CudaRankGroup: tensor parallelism's ranks 1..N-1 of a CudaBackend (issue 42; rank 0 is the
// backend's own CudaDecoder on the engine thread). It owns the NCCL group over GPUs 0..N-1 and
// the peer all-reduce of small messages (VLM_TP_ALLREDUCE, kernels/cuda/core/peer_or_nccl_communicator.h), the
// ranks' decoders (each on its GPU, with its shard and its KV cache) and one host thread per rank,
// which keeps its GPU current. start(fn) hands fn to every rank thread at once and returns; the
// caller runs rank 0's part, then join() waits for the ranks and rethrows the first rank's
// exception. The ranks' forward() only enqueue (their NCCL calls pair with rank 0's on the GPUs).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cuda/core/nccl_communicator.h"
#include "kernels/cuda/core/peer_or_nccl_communicator.h"
#include "model/decoder/cuda/cuda_decoder.h"

namespace vlm {

class CudaRankGroup {
 public:
  // The NCCL group over GPUs 0..size-1 (LoadError: NCCL not found, naming where it looked) and the
  // peer all-reduce per VLM_TP_ALLREDUCE (LoadError: a bad value; DeviceError: =peer without peer access).
  explicit CudaRankGroup(int size);
  ~CudaRankGroup();
  CudaRankGroup(const CudaRankGroup&) = delete;
  CudaRankGroup& operator=(const CudaRankGroup&) = delete;

  int size() const { return size_; }
  // Rank r's TensorParallel (its communicator) and GPU.
  TensorParallel rank(int r) const { return TensorParallel{r, size_, comms_.at(static_cast<size_t>(r)).get()}; }
  // Builds ranks 1..N-1's decoders, each on GPU r with `base` (its device and tp set per rank) and
  // num_kv_blocks (rank 0's, so block ids mean the same on every rank), and starts their threads.
  // The constructor, build() and the destructor restore the caller's current device.
  void build(const LlmDecoder& host, const CudaDecoderOptions& base, int64_t num_kv_blocks);
  CudaDecoder& decoder(int r) { return *decoders_.at(static_cast<size_t>(r - 1)); }
  // Whether small all-reduces go over peer access, and how many were enqueued that way (all ranks;
  // a captured graph's count once; read between jobs).
  bool peer_all_reduce_on() const { return peer_ != nullptr; }
  int64_t peer_all_reduces() const;

  // fn(rank r's decoder) on each rank thread r >= 1; returns at once.
  void start(std::function<void(CudaDecoder&)> fn);
  // Waits for the started fn on every rank; rethrows the lowest rank's exception.
  void join();

 private:
  void loop(int r);

  int size_;
  std::shared_ptr<cuda::NcclGroup> nccl_;
  std::shared_ptr<cuda::PeerAllReduce> peer_;  // null: NCCL only
  std::vector<std::unique_ptr<cuda::PeerOrNcclCommunicator>> comms_;  // [size]
  std::vector<std::unique_ptr<CudaDecoder>> decoders_;  // ranks 1..N-1
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void(CudaDecoder&)> job_;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;  // [size]
};

}  // namespace vlm
