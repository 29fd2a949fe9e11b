// FreeBlockQueue: the KV blocks with no reference, in eviction order, as an intrusive doubly
// linked list over block ids (O(1) push at either end, pop from the front and removal from the
// middle, which a prefix-cache hit on a free block needs). The BlockManager takes blocks from
// the front; it pushes blocks that hold nothing worth keeping to the front (reused first) and
// blocks still cached for prefix reuse to the back (least recently used first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vlm {

class FreeBlockQueue {
 public:
  // Blocks 0..num_blocks-1, all free, block 0 at the front.
  explicit FreeBlockQueue(int64_t num_blocks);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool contains(int32_t block) const { return in_[static_cast<size_t>(block)] != 0; }
  int32_t front() const { return head_; }

  int32_t pop_front();  // precondition: !empty()
  void push_front(int32_t block);  // precondition: !contains(block)
  void push_back(int32_t block);   // precondition: !contains(block)
  void remove(int32_t block);      // precondition: contains(block)

  // The blocks front to back (for checks and tests).
  std::vector<int32_t> to_vector() const;
  // Throws InternalError unless the links agree with each other, with `contains` and with size().
  void check() const;

 private:
  void link_between(int32_t block, int32_t prev, int32_t next);

  std::vector<int32_t> prev_, next_;  // [num_blocks], -1 at the ends
  std::vector<uint8_t> in_;           // [num_blocks] 1 when queued
  int32_t head_ = -1, tail_ = -1;
  int64_t size_ = 0;
};

}  // namespace vlm
