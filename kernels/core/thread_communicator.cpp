#include "kernels/core/thread_communicator.h"

#include <algorithm>
#include <cstring>

#include "kernels/core/check.h"

namespace vlm {

ThreadGroup::ThreadGroup(int size) : size_(size), in_(static_cast<size_t>(size)), bufs_(static_cast<size_t>(size)) {
  VLM_CHECK(size >= 1, "a thread group of {} ranks", size);
}

void ThreadGroup::barrier() {
  std::unique_lock<std::mutex> lock(mu_);
  VLM_CHECK(!aborted_, "tensor-parallel group aborted: another rank failed");
  const int64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  VLM_CHECK(generation_ != gen, "tensor-parallel group aborted: another rank failed");
}

void ThreadGroup::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

bool ThreadGroup::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  VLM_CHECK(group_ && rank >= 0 && rank < group_->size(), "rank {} of a group of {}", rank, group_ ? group_->size() : 0);
}

void ThreadCommunicator::all_reduce_sum(void* buf, int64_t count, DType dtype, void* /*stream*/) {
  VLM_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "all-reduce of {}", dtype_name(dtype));
  const int n = group_->size();
  if (n == 1) return;
  group_->bufs_[static_cast<size_t>(rank_)] = buf;
  group_->barrier();  // every rank's buffer published
  // This rank sums elements [b, e) of every rank's buffer, in rank order, into acc_.
  const int64_t share = (count + n - 1) / n;
  const int64_t b = std::min(count, share * rank_), e = std::min(count, b + share);
  acc_.assign(static_cast<size_t>(e - b), 0.0f);
  std::vector<float> tmp(static_cast<size_t>(e - b));
  const size_t es = dtype_size(dtype);
  for (int r = 0; r < n; ++r) {
    const char* src = static_cast<const char*>(group_->bufs_[static_cast<size_t>(r)]) + b * static_cast<int64_t>(es);
    convert_to_f32(src, dtype, tmp.data(), e - b);
    if (r == 0) std::copy(tmp.begin(), tmp.end(), acc_.begin());
    else
      for (size_t i = 0; i < tmp.size(); ++i) acc_[i] += tmp[i];
  }
  group_->barrier();  // every rank read every input: now write the sums back
  for (int r = 0; r < n; ++r)
    convert_from_f32(acc_.data(), dtype, static_cast<char*>(group_->bufs_[static_cast<size_t>(r)]) + b * static_cast<int64_t>(es),
                     e - b);
  group_->barrier();  // every buffer complete
}

void ThreadCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype, void* /*stream*/) {
  const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
  const int n = group_->size();
  if (n == 1) {
    std::memcpy(out, in, bytes);
    return;
  }
  group_->in_[static_cast<size_t>(rank_)] = in;
  group_->barrier();
  for (int r = 0; r < n; ++r)
    std::memcpy(static_cast<char*>(out) + static_cast<size_t>(r) * bytes, group_->in_[static_cast<size_t>(r)], bytes);
  group_->barrier();  // every rank copied every input
}

void naive_all_reduce_sum(const std::vector<void*>& bufs, int64_t count, DType dtype) {
  std::vector<float> sum(static_cast<size_t>(count), 0.0f), tmp(static_cast<size_t>(count));
  for (size_t r = 0; r < bufs.size(); ++r) {
    convert_to_f32(bufs[r], dtype, tmp.data(), count);
    for (int64_t i = 0; i < count; ++i) sum[static_cast<size_t>(i)] = r == 0 ? tmp[static_cast<size_t>(i)] : sum[static_cast<size_t>(i)] + tmp[static_cast<size_t>(i)];
  }
  for (void* b : bufs) convert_from_f32(sum.data(), dtype, b, count);
}

}  // namespace vlm
