// BlockManager: hands out the fixed-size blocks of the paged KV cache. It only executes what the
// scheduler decided: every mutation has a predicate to ask first (can_allocate/allocate,
// can_append/append_slots), and calling the mutation when the predicate is false is an internal
// error. Blocks carry reference counts so that the n choices of one request share their prompt's
// blocks; a shared block is copied before anyone writes into it (copy-on-write: the copy is
// returned to the caller, which must copy the KV bytes before the step runs).
//
// The block manager edits Sequence::block_table (and num_cached_tokens in trim); it never reads
// or writes KV data. Destroying it with blocks still referenced logs an error with the counts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduling/sequence.h"

namespace vlm {

// One block's KV to copy (all layers) before the step runs.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

class BlockManager {
 public:
  // num_blocks >= 1, block_size (B) >= 1. Initially every block is free.
  BlockManager(int64_t num_blocks, int block_size);
  ~BlockManager();
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  double usage() const { return static_cast<double>(num_used_blocks()) / static_cast<double>(num_blocks()); }
  int ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }

  // Blocks the sequence needs, beyond its table, to hold n more cache slots after
  // num_cached_tokens (counting a copy of a shared, partly filled last block).
  int64_t num_blocks_needed(const Sequence& seq, int32_t n) const;

  // A sequence without blocks gets the blocks for its first n cache slots.
  bool can_allocate(const Sequence& seq, int32_t n) const;
  void allocate(Sequence& seq, int32_t n);  // precondition: can_allocate, empty table

  // Room for n more cache slots after num_cached_tokens. append_slots grows the table and, when
  // the last block is shared and partly filled, replaces it with a private copy (pushed onto
  // `copies`). num_cached_tokens itself is advanced by the caller.
  bool can_append(const Sequence& seq, int32_t n) const;
  void append_slots(Sequence& seq, int32_t n, std::vector<BlockCopy>& copies);  // precondition: can_append

  // Drops the sequence's references; its table becomes empty.
  void free(Sequence& seq);

  // Shrinks the physical cache of the sequence to new_len slots (new_len <= num_cached_tokens):
  // releases the tail blocks no longer needed and sets num_cached_tokens = new_len.
  void trim(Sequence& seq, int32_t new_len);

  // The child shares every block of the parent (reference counts go up). Precondition: the
  // child's table is empty. Sets the child's num_cached_tokens to the parent's.
  void fork(const Sequence& parent, Sequence& child);

  // Throws InternalError unless: the free list holds each free block once; a block is free iff
  // its count is 0; and, given the tables of every live sequence, each block's count equals the
  // number of tables that hold it and every table is as long as its cache needs.
  void check_integrity(std::span<const Sequence* const> live) const;

 private:
  int32_t take_free_block();
  void release(int32_t block);
  int64_t blocks_for(int64_t slots) const { return (slots + block_size_ - 1) / block_size_; }

  int block_size_;
  std::vector<int32_t> ref_counts_;  // [num_blocks]
  std::vector<int32_t> free_list_;   // free block ids; taken from the back
};

}  // namespace vlm
