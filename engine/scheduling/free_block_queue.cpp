#include "engine/scheduling/free_block_queue.h"

#include "kernels/core/check.h"

namespace vlm {

FreeBlockQueue::FreeBlockQueue(int64_t num_blocks)
    : prev_(static_cast<size_t>(num_blocks), -1), next_(static_cast<size_t>(num_blocks), -1),
      in_(static_cast<size_t>(num_blocks), 0) {
  for (int64_t b = 0; b < num_blocks; ++b) push_back(static_cast<int32_t>(b));
}

void FreeBlockQueue::link_between(int32_t block, int32_t prev, int32_t next) {
  VLM_CHECK(block >= 0 && block < static_cast<int32_t>(in_.size()) && !in_[block], "queueing block {} twice", block);
  prev_[block] = prev;
  next_[block] = next;
  (prev >= 0 ? next_[prev] : head_) = block;
  (next >= 0 ? prev_[next] : tail_) = block;
  in_[block] = 1;
  ++size_;
}

void FreeBlockQueue::push_front(int32_t block) { link_between(block, -1, head_); }
void FreeBlockQueue::push_back(int32_t block) { link_between(block, tail_, -1); }

void FreeBlockQueue::remove(int32_t block) {
  VLM_CHECK(block >= 0 && block < static_cast<int32_t>(in_.size()) && in_[block], "block {} is not queued", block);
  const int32_t p = prev_[block], n = next_[block];
  (p >= 0 ? next_[p] : head_) = n;
  (n >= 0 ? prev_[n] : tail_) = p;
  prev_[block] = next_[block] = -1;
  in_[block] = 0;
  --size_;
}

int32_t FreeBlockQueue::pop_front() {
  VLM_CHECK(head_ >= 0, "no free KV block");
  const int32_t b = head_;
  remove(b);
  return b;
}

std::vector<int32_t> FreeBlockQueue::to_vector() const {
  std::vector<int32_t> out;
  for (int32_t b = head_; b >= 0 && out.size() <= in_.size(); b = next_[b]) out.push_back(b);
  return out;
}

void FreeBlockQueue::check() const {
  int64_t n = 0;
  int32_t prev = -1;
  for (int32_t b = head_; b >= 0; prev = b, b = next_[b]) {
    VLM_CHECK(++n <= size_, "free queue: more than {} blocks linked (a cycle?)", size_);
    VLM_CHECK(in_[b], "free queue links block {}, which is not marked queued", b);
    VLM_CHECK(prev_[b] == prev, "free queue: block {} points back to {}, not {}", b, prev_[b], prev);
  }
  VLM_CHECK(prev == tail_, "free queue ends at {}, tail is {}", prev, tail_);
  int64_t marked = 0;
  for (uint8_t f : in_) marked += f;
  VLM_CHECK(n == size_ && marked == size_, "free queue: {} linked, {} marked, size {}", n, marked, size_);
}

}  // namespace vlm
