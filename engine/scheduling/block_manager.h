// BlockManager: hands out the fixed-size blocks of the paged KV cache. It only executes what the
// scheduler decided: every mutation has a predicate to ask first (can_allocate/allocate,
// can_append/append_slots), and calling the mutation when the predicate is false is an internal
// error. Blocks carry reference counts so that the n choices of one request share their prompt's
// blocks; a shared block is copied before anyone writes into it (copy-on-write: the copy is
// returned to the caller, which must copy the KV bytes before the step runs).
//
// Automatic prefix caching (when enabled; vLLM's V1 design): a full block whose K/V a step has
// computed is published under its BlockHash (block_hash.h; cache_full_blocks). A new sequence
// whose leading full blocks hash the same takes them (match_prefix, then allocate with the hit
// count): their tokens count as computed and only the rest is prefilled. A block whose count
// drops to 0 keeps its hash and stays cached on the free queue, least recently freed at the
// front, a sequence's tail blocks ahead of its head blocks; it is evicted (its hash forgotten)
// only when it is taken for new data. Blocks without a hash go to the front and are reused
// first. Block ids mean the same on every backend: nothing here touches KV memory.
//
// The block manager edits Sequence::block_table (and num_cached_tokens in trim, num_computed and
// num_cached in a cached allocate, num_published_blocks); it never reads or writes KV data.
// Destroying it with blocks still referenced logs an error with the counts.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/scheduling/block_hash.h"
#include "engine/scheduling/free_block_queue.h"
#include "engine/scheduling/sequence.h"

namespace vlm {

// One block's KV to copy (all layers) before the step runs.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

// vLLM's prefix-cache counters, in tokens: every admission of a sequence that reads the cache
// queries its num_tokens() and hits the tokens of the blocks it took from the cache.
struct PrefixCacheStats {
  int64_t queries = 0;   // vllm:prefix_cache_queries_total
  int64_t hits = 0;      // vllm:prefix_cache_hits_total
  int64_t evicted = 0;   // cached blocks taken for new data
  int64_t num_resets = 0;
};

class BlockManager {
 public:
  // num_blocks >= 1, block_size (B) >= 1. Initially every block is free.
  BlockManager(int64_t num_blocks, int block_size, bool enable_prefix_caching = false);
  ~BlockManager();
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;

  int block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  // Free blocks: no reference (cached ones included: they are evicted on demand).
  int64_t num_free_blocks() const { return free_.size(); }
  int64_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  int64_t num_cached_blocks() const { return static_cast<int64_t>(cached_.size()); }
  double usage() const { return static_cast<double>(num_used_blocks()) / static_cast<double>(num_blocks()); }
  int ref_count(int32_t block) const { return ref_counts_.at(static_cast<size_t>(block)); }
  bool is_cached(int32_t block) const { return has_hash_.at(static_cast<size_t>(block)) != 0; }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  std::vector<int32_t> free_queue() const { return free_.to_vector(); }  // front (next taken) first

  // Blocks the sequence needs, beyond its table, to hold n more cache slots after
  // num_cached_tokens (counting a copy of a shared, partly filled last block).
  int64_t num_blocks_needed(const Sequence& seq, int32_t n) const;

  // Prefix caching: hashes the sequence's full blocks (extend_block_hashes) and returns how many
  // leading ones are cached, at most (num_tokens - 1) / B so that at least one token is left to
  // compute (the step that samples). 0 when caching is off or the sequence does not read it.
  int32_t match_prefix(Sequence& seq);

  // A sequence without blocks gets its first num_hit_blocks blocks from the cache (the blocks
  // match_prefix just found; their tokens become computed: num_computed_tokens ==
  // num_cached_tokens == num_hit_blocks * B) and fresh blocks for its next n cache slots.
  // Counts the admission in prefix_cache_stats() when the sequence reads the cache.
  bool can_allocate(const Sequence& seq, int32_t n, int32_t num_hit_blocks = 0) const;
  void allocate(Sequence& seq, int32_t n, int32_t num_hit_blocks = 0);  // precondition: can_allocate

  // Room for n more cache slots after num_cached_tokens. append_slots grows the table and, when
  // the last block is shared and partly filled, replaces it with a private copy (pushed onto
  // `copies`). num_cached_tokens itself is advanced by the caller.
  bool can_append(const Sequence& seq, int32_t n) const;
  void append_slots(Sequence& seq, int32_t n, std::vector<BlockCopy>& copies);  // precondition: can_append

  // After a step computed the sequence's KV up to num_computed_tokens: publishes each full block
  // below min(num_computed_tokens, seq.prefix_cache_publish_limit) not published yet. A block
  // whose hash another block already holds stays private. No-op when caching is off.
  void cache_full_blocks(Sequence& seq);

  // Forgets every hash (vLLM's reset_prefix_cache); blocks in use stay with their sequences.
  // Returns the number of blocks that were cached.
  int64_t reset_prefix_cache();

  // Drops the sequence's references; its table becomes empty.
  void free(Sequence& seq);

  // Shrinks the physical cache of the sequence to new_len slots (new_len <= num_cached_tokens):
  // releases the tail blocks no longer needed and sets num_cached_tokens = new_len.
  void trim(Sequence& seq, int32_t new_len);

  // The child shares every block of the parent (reference counts go up). Precondition: the
  // child's table is empty. Sets the child's num_cached_tokens (and num_published_blocks) to
  // the parent's.
  void fork(const Sequence& parent, Sequence& child);

  // Throws InternalError unless: the free queue is well linked and holds exactly the blocks
  // whose count is 0; given the tables of every live sequence, each block's count equals the
  // number of tables that hold it and every table is as long as its cache needs; the hash map
  // and the blocks' hashes agree both ways; and a cached block at index i of a live table
  // carries that sequence's block hash i.
  void check_integrity(std::span<const Sequence* const> live) const;

 private:
  int32_t take_free_block();  // evicts the block's hash if it had one
  void take_cached_block(int32_t block);
  void release(int32_t block);
  void forget_hash(int32_t block);
  int64_t blocks_for(int64_t slots) const { return (slots + block_size_ - 1) / block_size_; }

  int block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_counts_;  // [num_blocks]
  FreeBlockQueue free_;              // blocks with count 0, eviction order
  std::vector<BlockHash> hash_;      // [num_blocks] valid where has_hash_
  std::vector<uint8_t> has_hash_;    // [num_blocks]
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;  // hash -> block
  PrefixCacheStats stats_;
};

}  // namespace vlm
