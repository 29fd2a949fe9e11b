#include "engine/scheduling/block_manager.h"

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/core/log.h"

namespace vlm {

BlockManager::BlockManager(int64_t num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), free_(num_blocks) {
  VLM_CHECK(num_blocks >= 1 && num_blocks <= INT32_MAX && block_size >= 1, "{} blocks of {} tokens",
            num_blocks, block_size);
  ref_counts_.assign(static_cast<size_t>(num_blocks), 0);
  hash_.resize(static_cast<size_t>(num_blocks));
  has_hash_.assign(static_cast<size_t>(num_blocks), 0);
}

BlockManager::~BlockManager() {
  if (num_used_blocks() == 0) return;
  int64_t refs = 0;
  for (int32_t c : ref_counts_) refs += c;
  VLM_LOG_ERROR("KV block leak: BlockManager destroyed with {} of {} blocks still referenced ({} references)",
                num_used_blocks(), num_blocks(), refs);
}

int32_t BlockManager::take_free_block() {
  const int32_t b = free_.pop_front();
  VLM_CHECK(ref_counts_[b] == 0, "free block {} has {} references", b, ref_counts_[b]);
  if (has_hash_[b]) {  // evict: the block gets new data
    forget_hash(b);
    ++stats_.evicted;
  }
  ref_counts_[b] = 1;
  return b;
}

void BlockManager::take_cached_block(int32_t block) {
  VLM_CHECK(has_hash_[block], "block {} is not cached", block);
  if (ref_counts_[block] == 0) free_.remove(block);
  ++ref_counts_[block];
}

void BlockManager::release(int32_t block) {
  VLM_CHECK(block >= 0 && block < num_blocks() && ref_counts_[block] > 0, "releasing block {} (count {})",
            block, block >= 0 && block < num_blocks() ? ref_counts_[block] : -1);
  if (--ref_counts_[block] > 0) return;
  if (has_hash_[block]) free_.push_back(block);  // stays cached, evicted last
  else free_.push_front(block);
}

void BlockManager::forget_hash(int32_t block) {
  auto it = cached_.find(hash_[block]);
  if (it != cached_.end() && it->second == block) cached_.erase(it);
  has_hash_[block] = 0;
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

int32_t BlockManager::match_prefix(Sequence& seq) {
  if (!prefix_caching_ || !seq.reads_prefix_cache) return 0;
  extend_block_hashes(seq, block_size_);
  const auto most = std::min<int64_t>((seq.num_tokens() - 1) / block_size_,
                                      static_cast<int64_t>(seq.block_hashes.size()));
  int32_t hits = 0;
  while (hits < most && cached_.count(seq.block_hashes[static_cast<size_t>(hits)])) ++hits;
  return hits;
}

bool BlockManager::can_allocate(const Sequence& seq, int32_t n, int32_t num_hit_blocks) const {
  if (!seq.block_table.empty() || num_hit_blocks < 0 ||
      num_hit_blocks > static_cast<int32_t>(seq.block_hashes.size()))
    return false;
  int64_t need = blocks_for(static_cast<int64_t>(num_hit_blocks) * block_size_ + n) - num_hit_blocks;
  for (int32_t i = 0; i < num_hit_blocks; ++i) {
    auto it = cached_.find(seq.block_hashes[static_cast<size_t>(i)]);
    if (it == cached_.end()) return false;
    if (ref_counts_[it->second] == 0) ++need;  // a cached free block leaves the free queue
  }
  return need <= num_free_blocks();
}

void BlockManager::allocate(Sequence& seq, int32_t n, int32_t num_hit_blocks) {
  VLM_CHECK(seq.block_table.empty() && seq.num_cached_tokens == 0 && seq.num_computed_tokens == 0,
            "allocate: sequence {} already has {} blocks, {} cached", seq.id, seq.block_table.size(),
            seq.num_cached_tokens);
  VLM_CHECK(can_allocate(seq, n, num_hit_blocks), "allocate: sequence {} needs {} blocks after {} hits, {} free",
            seq.id, blocks_for(static_cast<int64_t>(num_hit_blocks) * block_size_ + n) - num_hit_blocks,
            num_hit_blocks, num_free_blocks());
  // The hits first: taking fresh blocks could otherwise evict one of them.
  for (int32_t i = 0; i < num_hit_blocks; ++i) {
    const int32_t b = cached_.at(seq.block_hashes[static_cast<size_t>(i)]);
    take_cached_block(b);
    seq.block_table.push_back(b);
  }
  const int32_t hit_tokens = num_hit_blocks * block_size_;
  seq.num_computed_tokens = seq.num_cached_tokens = hit_tokens;
  seq.num_published_blocks = num_hit_blocks;
  const int64_t need = blocks_for(static_cast<int64_t>(hit_tokens) + n);
  while (static_cast<int64_t>(seq.block_table.size()) < need) seq.block_table.push_back(take_free_block());
  if (prefix_caching_ && seq.reads_prefix_cache) {
    stats_.queries += seq.num_tokens();
    stats_.hits += hit_tokens;
  }
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

void BlockManager::cache_full_blocks(Sequence& seq) {
  // Cache positions are token positions only while nothing was compacted (LOOK-M never publishes).
  if (!prefix_caching_ || seq.num_cached_tokens != seq.num_computed_tokens) return;
  const int32_t limit = std::min(seq.num_computed_tokens, seq.prefix_cache_publish_limit);
  const int32_t full = limit / block_size_;
  if (full <= seq.num_published_blocks) return;
  extend_block_hashes(seq, block_size_);
  VLM_CHECK(static_cast<int32_t>(seq.block_table.size()) >= full, "sequence {}: {} blocks, {} full", seq.id,
            seq.block_table.size(), full);
  for (int32_t i = seq.num_published_blocks; i < full; ++i) {
    const int32_t b = seq.block_table[static_cast<size_t>(i)];
    const BlockHash& h = seq.block_hashes[static_cast<size_t>(i)];
    if (has_hash_[b]) continue;  // a hit, or shared with a forked choice that published it
    if (!cached_.emplace(h, b).second) continue;  // computed twice at once: the first one stays cached
    hash_[b] = h;
    has_hash_[b] = 1;
  }
  seq.num_published_blocks = full;
}

int64_t BlockManager::reset_prefix_cache() {
  const auto n = static_cast<int64_t>(cached_.size());
  for (const auto& [h, b] : cached_) has_hash_[b] = 0;
  cached_.clear();
  ++stats_.num_resets;
  return n;
}

void BlockManager::free(Sequence& seq) {
  for (int32_t b : seq.block_table) {
    VLM_CHECK(b >= 0 && b < num_blocks() && ref_counts_[b] > 0, "sequence {} frees block {} (count {})", seq.id, b,
              b >= 0 && b < num_blocks() ? ref_counts_[b] : -1);
    --ref_counts_[b];
  }
  // Cached blocks to the back, the sequence's tail first (evicting a head block would make the
  // blocks after it unreachable anyway); the others to the front, the tail on top (reused first).
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it)
    if (ref_counts_[*it] == 0 && has_hash_[*it]) free_.push_back(*it);
  for (int32_t b : seq.block_table)
    if (ref_counts_[b] == 0 && !has_hash_[b]) free_.push_front(b);
  seq.block_table.clear();
  seq.num_published_blocks = 0;
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
  seq.num_published_blocks = std::min(seq.num_published_blocks, static_cast<int32_t>(keep));
}

void BlockManager::fork(const Sequence& parent, Sequence& child) {
  VLM_CHECK(child.block_table.empty(), "fork: child {} already has {} blocks", child.id, child.block_table.size());
  for (int32_t b : parent.block_table) {
    VLM_CHECK(ref_counts_[b] > 0, "fork: parent {} holds free block {}", parent.id, b);
    ++ref_counts_[b];
  }
  child.block_table = parent.block_table;
  child.num_cached_tokens = parent.num_cached_tokens;
  child.num_published_blocks = parent.num_published_blocks;
}

void BlockManager::check_integrity(std::span<const Sequence* const> live) const {
  const int64_t N = num_blocks();
  free_.check();
  std::vector<int32_t> held(static_cast<size_t>(N), 0);
  for (const Sequence* s : live) {
    VLM_CHECK(static_cast<int64_t>(s->block_table.size()) == blocks_for(s->num_cached_tokens),
              "sequence {}: {} blocks for {} cached slots", s->id, s->block_table.size(), s->num_cached_tokens);
    VLM_CHECK(s->num_cached_tokens <= s->num_computed_tokens, "sequence {}: {} cached > {} computed", s->id,
              s->num_cached_tokens, s->num_computed_tokens);
    VLM_CHECK(s->num_published_blocks >= 0 && s->num_published_blocks <= static_cast<int32_t>(s->block_table.size()),
              "sequence {}: {} blocks published of {}", s->id, s->num_published_blocks, s->block_table.size());
    for (size_t i = 0; i < s->block_table.size(); ++i) {
      const int32_t b = s->block_table[i];
      VLM_CHECK(b >= 0 && b < N, "sequence {} holds block {} of {}", s->id, b, N);
      ++held[b];
      VLM_CHECK(!has_hash_[b] || (i < s->block_hashes.size() && s->block_hashes[i] == hash_[b]),
                "sequence {}: block {} at index {} is cached under another block's hash", s->id, b, i);
    }
  }
  int64_t hashed = 0;
  for (int64_t b = 0; b < N; ++b) {
    VLM_CHECK((ref_counts_[b] == 0) == free_.contains(static_cast<int32_t>(b)), "block {}: count {}, on free queue {}",
              b, ref_counts_[b], free_.contains(static_cast<int32_t>(b)));
    VLM_CHECK(ref_counts_[b] == held[b], "block {}: count {} but {} tables hold it", b, ref_counts_[b], held[b]);
    hashed += has_hash_[b];
  }
  for (const auto& [h, b] : cached_)
    VLM_CHECK(b >= 0 && b < N && has_hash_[b] && hash_[b] == h, "the prefix cache maps a hash to block {}, "
              "which does not carry it", b);
  VLM_CHECK(hashed == static_cast<int64_t>(cached_.size()), "{} blocks carry a hash, the prefix cache maps {}",
            hashed, cached_.size());
  VLM_CHECK(prefix_caching_ || cached_.empty(), "prefix caching is off, and {} blocks are cached", cached_.size());
}

}  // namespace vlm
