#include "model/tokenizer/segment_cache.h"

namespace vlm {

bool SegmentCache::lookup(std::string_view text, bool first, std::vector<int32_t>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  Index& index = index_[first];
  auto it = index.find(text);
  if (it == index.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  out.insert(out.end(), it->second->ids.begin(), it->second->ids.end());
  return true;
}

void SegmentCache::insert(std::string_view text, bool first, std::span<const int32_t> ids) {
  if (!keeps(text)) return;
  std::lock_guard<std::mutex> lock(mu_);
  Index& index = index_[first];
  if (index.find(text) != index.end()) return;
  lru_.push_front(Entry{std::string(text), first, std::vector<int32_t>(ids.begin(), ids.end())});
  index.emplace(lru_.front().text, lru_.begin());
  bytes_ += lru_.front().bytes();
  while (bytes_ > max_bytes_) {
    const Entry& last = lru_.back();
    bytes_ -= last.bytes();
    index_[last.first].erase(last.text);
    lru_.pop_back();
  }
}

void SegmentCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_[0].clear();
  index_[1].clear();
  bytes_ = 0;
}

size_t SegmentCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace vlm
