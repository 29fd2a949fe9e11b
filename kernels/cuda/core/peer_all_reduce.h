// PeerAllReduce: a one-shot all-reduce (sum) for small messages among the GPUs of one process,
// over peer access (NVLink), for tensor parallelism's per-layer all-reduces of decode (issue 42:
// a decode step of one sequence all-reduces 2 x layers messages of hidden x 2 bytes, 7-16 KB, where
// NCCL's in-graph call costs ~10-20 us each).
//
// Each rank r owns, on its device, one allocation made once: staging [2][capacity] bytes (double
// buffered by the parity of the call counter), flags [kMaxBlocks][kMaxRanks] u32 written by the
// peers, and counters [kMaxBlocks] u32 (the calls made so far, advanced by the kernel itself, so a
// CUDA graph replays without resets). One kernel per rank, of at most kMaxBlocks blocks:
//   1. block b copies its 16-byte chunks of the input into its own staging[c & 1] (c = counter + 1);
//   2. signals every rank (st.release.sys of c into the peer's flags[b][r], after
//      __threadfence_system) and waits until every rank's flags[b][p] >= c (ld.acquire.sys);
//   3. reads every rank's staging (over NVLink) for its chunks, sums in f32 in rank order 0..N-1
//      (every rank's result is bit-identical, and equals naive_all_reduce_sum's), and writes the
//      output in place.
// Chunk k (16 bytes) always belongs to block (k / kThreads) % kMaxBlocks, whatever the count, so a
// block's barrier of call c+1 proves every peer's same block finished reading call c's staging of
// that parity: staging may be rewritten at c+2 with no second barrier. A block with no chunk in a
// call is not launched (its counter then stays, the same on every rank).
//
// Contracts: every rank calls all_reduce_sum with the same count and dtype, in the same order as
// its other collectives, and a rank's calls are ordered (one stream, or streams joined by events:
// two of them running at once on one GPU would race on its counters); the rank's device is current on the calling thread and `stream` is one of
// its streams (capturable: the launch has only fixed pointers). The N kernels may be launched from
// one host thread: rank r's kernel spins only on its own GPU, waiting for the peers' kernels. A peer
// that has not arrived within 60 s makes the kernel trap (a CUDA error, not a hang).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"

namespace vlm::cuda {

// Whether every ordered pair of `devices` has peer access (cudaDeviceCanAccessPeer); when not, the
// first pair that lacks it goes to *why (may be null). A single device: false.
bool peer_access_possible(const std::vector<int>& devices, std::string* why = nullptr);

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = 8;
  static constexpr int kMaxBlocks = 64;  // of the H200's 132 SMs: all resident beside other work
  static constexpr int kThreads = 512;

  // Enables peer access between every pair of `devices` (rank r on devices[r]; an already enabled
  // pair is fine) and allocates each rank's area, zeroed; `capacity_bytes` is the largest message.
  // Throws DeviceError when peer access is not possible, InternalError on a CUDA failure.
  PeerAllReduce(const std::vector<int>& devices, size_t capacity_bytes);
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  int device(int rank) const { return devices_.at(static_cast<size_t>(rank)); }
  size_t capacity_bytes() const { return capacity_; }
  // Whether all_reduce_sum takes this message: F32, BF16 or F16, and count * size <= capacity.
  // Depends only on its arguments, so every rank decides alike.
  bool accepts(int64_t count, DType dtype) const;

  // buf [count] of dtype (any alignment of the type) = the sum over the ranks of their buf, in
  // place, on rank `rank`'s stream. count == 0 enqueues nothing. InternalError when !accepts().
  void all_reduce_sum(int rank, void* buf, int64_t count, DType dtype, cudaStream_t stream);

 private:
  std::vector<int> devices_;
  size_t capacity_ = 0;    // staging bytes per parity, a multiple of 16
  std::vector<char*> areas_;  // [size]: flags, counters, then staging [2][capacity_]
};

}  // namespace vlm::cuda
