#include "engine/scheduling/block_manager.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm {

BlockManager::BlockManager(int64_t num_blocks, int block_size) : block_size_(block_size) {
  VLM_CHECK(num_blocks >= 1 && num_blocks <= INT32_MAX && block_size >= 1, "{} blocks of {} tokens",
            num_blocks, block_size);
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  free_list_.reserve(static_cast<size_t>(num_blocks));
  // Lowest ids come out first.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(static_cast<int32_t>(b));
}

BlockManager::~BlockManager() {
  if (num_used_blocks() == 0) return;
  int64_t refs = 0;
  for (int32_t c : ref_counts_) refs += c;
  VLM_LOG_ERROR("KV block leak: BlockManager destroyed with {} of {} blocks still referenced ({} references)",
                num_used_blocks(), num_blocks(), refs);
}

int32_t BlockManager::take_free_block() {
  VLM_CHECK(!free_list_.empty(), "no free KV block");
  const int32_t b = free_list_.back();
  free_list_.pop_back();
  VLM_CHECK(ref_counts_[b] == 0, "free block {} has {} references", b, ref_counts_[b]);
  ref_counts_[b] = 1;
  return b;
}

void BlockManager::release(int32_t block) {
  VLM_CHECK(block >= 0 && block < num_blocks() && ref_counts_[block] > 0, "releasing block {} (count {})",
            block, block >= 0 && block < num_blocks() ? ref_counts_[block] : -1);
  if (--ref_counts_[block] == 0) free_list_.push_back(block);
}

int64_t BlockManager::num_blocks_needed(const Sequence& seq, int32_t n) const {
  VLM_CHECK(n >= 0, "{} slots", n);
  const int64_t have = static_cast<int64_t>(seq.block_table.size());
  int64_t need = std::max<int64_t>(0, blocks_for(static_cast<int64_t>(seq.num_cached_tokens) + n) - have);
  // Writing into a shared, partly filled last block needs a private copy of it.
  if (n > 0 && seq.num_cached_tokens % block_size_ != 0 && have > 0 && ref_counts_[seq.block_table.back()] > 1)
    ++need;
  return need;
}

bool BlockManager::can_allocate(const Sequence& seq, int32_t n) const {
  return seq.block_table.empty() && num_blocks_needed(seq, n) <= num_free_blocks();
}

void BlockManager::allocate(Sequence& seq, int32_t n) {
  VLM_CHECK(seq.block_table.empty() && seq.num_cached_tokens == 0,
            "allocate: sequence {} already has {} blocks, {} cached", seq.id, seq.block_table.size(),
            seq.num_cached_tokens);
  VLM_CHECK(can_allocate(seq, n), "allocate: sequence {} needs {} blocks, {} free", seq.id,
            num_blocks_needed(seq, n), num_free_blocks());
  const int64_t need = blocks_for(n);
  for (int64_t i = 0; i < need; ++i) seq.block_table.push_back(take_free_block());
}

bool BlockManager::can_append(const Sequence& seq, int32_t n) const {
  return num_blocks_needed(seq, n) <= num_free_blocks();
}

void BlockManager::append_slots(Sequence& seq, int32_t n, std::vector<BlockCopy>& copies) {
  VLM_CHECK(can_append(seq, n), "append_slots: sequence {} needs {} blocks for {} slots, {} free", seq.id,
            num_blocks_needed(seq, n), n, num_free_blocks());
  VLM_CHECK(static_cast<int64_t>(seq.block_table.size()) == blocks_for(seq.num_cached_tokens),
            "sequence {}: {} blocks for {} cached tokens", seq.id, seq.block_table.size(), seq.num_cached_tokens);
  if (n == 0) return;
  if (seq.num_cached_tokens % block_size_ != 0 && ref_counts_[seq.block_table.back()] > 1) {
    const int32_t shared = seq.block_table.back();
    const int32_t copy = take_free_block();
    release(shared);
    seq.block_table.back() = copy;
    copies.push_back({shared, copy});
  }
  const int64_t need = blocks_for(static_cast<int64_t>(seq.num_cached_tokens) + n);
  while (static_cast<int64_t>(seq.block_table.size()) < need) seq.block_table.push_back(take_free_block());
}

void BlockManager::free(Sequence& seq) {
  for (int32_t b : seq.block_table) release(b);
  seq.block_table.clear();
}

void BlockManager::trim(Sequence& seq, int32_t new_len) {
  VLM_CHECK(new_len >= 0 && new_len <= seq.num_cached_tokens, "trim sequence {} to {} of {} cached slots",
            seq.id, new_len, seq.num_cached_tokens);
  const auto keep = static_cast<size_t>(blocks_for(new_len));
  while (seq.block_table.size() > keep) {
    release(seq.block_table.back());
    seq.block_table.pop_back();
  }
  seq.num_cached_tokens = new_len;
}

void BlockManager::fork(const Sequence& parent, Sequence& child) {
  VLM_CHECK(child.block_table.empty(), "fork: child {} already has {} blocks", child.id, child.block_table.size());
  for (int32_t b : parent.block_table) {
    VLM_CHECK(ref_counts_[b] > 0, "fork: parent {} holds free block {}", parent.id, b);
    ++ref_counts_[b];
  }
  child.block_table = parent.block_table;
  child.num_cached_tokens = parent.num_cached_tokens;
}

void BlockManager::check_integrity(std::span<const Sequence* const> live) const {
  const int64_t N = num_blocks();
  std::vector<uint8_t> in_free(static_cast<size_t>(N), 0);
  for (int32_t b : free_list_) {
    VLM_CHECK(b >= 0 && b < N, "free list holds block {} of {}", b, N);
    VLM_CHECK(!in_free[b], "block {} is on the free list twice", b);
    in_free[b] = 1;
  }
  std::vector<int32_t> held(static_cast<size_t>(N), 0);
  for (const Sequence* s : live) {
    VLM_CHECK(static_cast<int64_t>(s->block_table.size()) == blocks_for(s->num_cached_tokens),
              "sequence {}: {} blocks for {} cached slots", s->id, s->block_table.size(), s->num_cached_tokens);
    VLM_CHECK(s->num_cached_tokens <= s->num_computed_tokens, "sequence {}: {} cached > {} computed", s->id,
              s->num_cached_tokens, s->num_computed_tokens);
    for (int32_t b : s->block_table) {
      VLM_CHECK(b >= 0 && b < N, "sequence {} holds block {} of {}", s->id, b, N);
      ++held[b];
    }
  }
  for (int64_t b = 0; b < N; ++b) {
    VLM_CHECK((ref_counts_[b] == 0) == (in_free[b] == 1), "block {}: count {}, on free list {}", b,
              ref_counts_[b], in_free[b]);
    VLM_CHECK(ref_counts_[b] == held[b], "block {}: count {} but {} tables hold it", b, ref_counts_[b], held[b]);
  }
}

}  // namespace vlm
