// ThreadCommunicator: the CPU's Communicator, N ranks as N threads of one process (tests and
// `--device cpu` tensor parallelism). ThreadGroup is the state the ranks share; each rank thread
// holds a ThreadCommunicator(group, r). A collective is a barrier, every rank's pointer published,
// a barrier, rank r computes its share of the result from all ranks' inputs, a barrier. The sum
// is taken in f32 in rank order (rank 0 + rank 1 + ...) on every rank: deterministic and the same
// bits on every rank. abort() (a rank that failed) wakes every waiting rank, whose collective then
// throws InternalError, so a failure in one rank cannot hang the others.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/core/communicator.h"

namespace vlm {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  int size() const { return size_; }
  // Waits until every rank arrived (InternalError once aborted).
  void barrier();
  void abort();
  bool aborted() const;

 private:
  friend class ThreadCommunicator;
  int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const void*> in_;  // [size] each rank's input of the current gather
  std::vector<void*> bufs_;      // [size] each rank's buffer of the current all-reduce
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void all_reduce_sum(void* buf, int64_t count, DType dtype, void* stream) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype, void* stream) override;

 private:
  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  std::vector<float> acc_;  // this rank's share of a sum, f32
};

// The naive reference of an all-reduce for tests: every rank's host buffer [count] of `dtype`
// summed in f32 in rank order and written back (rounded to dtype) to every buffer.
void naive_all_reduce_sum(const std::vector<void*>& bufs, int64_t count, DType dtype);

}  // namespace vlm
