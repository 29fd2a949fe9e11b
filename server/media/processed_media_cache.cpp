#include "server/media/processed_media_cache.h"

#include <utility>

namespace vlm {

ProcessedMediaCache::ProcessedMediaCache(int64_t max_bytes) : max_bytes_(max_bytes > 0 ? max_bytes : 0) {}

BlockHash ProcessedMediaCache::key(std::string_view bytes, const BlockHash& preprocess) {
  Hasher128 h;
  h.add(0x6d6d2d6361636865ull);  // "mm-cache"
  h.add(preprocess);
  h.add_bytes(bytes.data(), bytes.size());
  return h.digest();
}

int64_t ProcessedMediaCache::bytes_of(const Item& item) {
  int64_t frames = 0;  // a Frames8 item's 8-bit frames
  for (const RgbImage& f : item.pixels.frames) frames += static_cast<int64_t>(f.pixels.size());
  return static_cast<int64_t>(item.pixels.data.size() * sizeof(float) + sizeof(Item)) + frames;
}

std::shared_ptr<const ProcessedMediaCache::Item> ProcessedMediaCache::get_or_make(
    const BlockHash& key, const std::function<MediaPixels()>& make) {
  if (enabled()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->item;
    }
  }
  auto item = std::make_shared<Item>();
  item->pixels = make();
  item->item_key = media_item_key(item->pixels);
  const int64_t bytes = bytes_of(*item);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  if (bytes > max_bytes_ || index_.count(key)) return item;
  while (stats_.bytes + bytes > max_bytes_) {
    const Entry& last = lru_.back();
    stats_.bytes -= last.bytes;
    index_.erase(last.key);
    lru_.pop_back();
    ++stats_.evictions;
  }
  lru_.push_front(Entry{key, item, bytes});
  index_.emplace(key, lru_.begin());
  stats_.bytes += bytes;
  return item;
}

ProcessedMediaCache::Stats ProcessedMediaCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = static_cast<int64_t>(lru_.size());
  return s;
}

}  // namespace vlm
