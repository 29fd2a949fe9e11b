// ProcessedMediaCache: preprocessed images kept by the identity of their raw bytes and their
// preprocessing (vLLM's multimodal processor cache, `--mm-processor-cache-gb`). A chat resends
// its images with every turn; with the cache a repeated image is fetched (a URL's content may
// change, so the bytes are always read) and its bytes hashed, but neither decoded, resized,
// normalized nor hashed as pixels again: the stored MediaPixels and their media_item_key (the
// prefix cache's identity of the item, engine/scheduling/block_hash.h) are reused.
//
// Key: Hasher128 over the raw bytes and the loader's preprocess key (every setting that changes
// the pixels or what is accepted: preprocessor config, limits; see image_preprocess_key()). Two
// byte strings that hash alike would share an entry: the hash is not cryptographic (as the prefix
// cache's own, whose documentation says what that means for tenants).
//
// LRU within a byte budget (the items' pixel bytes): a new entry evicts the least recently used
// ones; an item larger than the whole budget is made and returned but not kept. Budget 0: off
// (every call makes its item). Thread-safe; an item is made outside the lock, so two requests that
// miss on the same image at once both make it (the second store is dropped).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/scheduling/block_hash.h"
#include "model/media/media_pixels.h"
#include "server/media/media_fetch.h"

namespace vlm {

class ProcessedMediaCache {
 public:
  struct Item {
    MediaPixels pixels;
    BlockHash item_key;  // media_item_key(pixels)
  };
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;     // calls that made their item (also when it was not kept)
    int64_t evictions = 0;  // entries dropped for room
    int64_t bytes = 0;      // pixel bytes held now
    int64_t entries = 0;
  };

  explicit ProcessedMediaCache(int64_t max_bytes);
  bool enabled() const { return max_bytes_ > 0; }
  int64_t max_bytes() const { return max_bytes_; }

  // The key of raw media bytes under a loader's preprocessing.
  static BlockHash key(std::string_view bytes, const BlockHash& preprocess);

  // The item stored under `key` (a hit moves it to the front), else make()'s item with its
  // media_item_key, stored when the cache is on and the item fits. make() may throw (nothing is
  // stored then).
  std::shared_ptr<const Item> get_or_make(const BlockHash& key, const std::function<MediaPixels()>& make);

  Stats stats() const;

 private:
  struct Entry {
    BlockHash key;
    std::shared_ptr<const Item> item;
    int64_t bytes = 0;
  };
  static int64_t bytes_of(const Item& item);

  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<BlockHash, std::list<Entry>::iterator, BlockHashHasher> index_;
  Stats stats_;
};

// An image part loaded through the cache: its pixels, and its media_item_key when the cache made
// or had it (none with the cache off: the engine hashes the pixels itself).
struct LoadedImage {
  MediaPixels pixels;
  std::optional<BlockHash> item_key;
};

// Loader: fetch_image_bytes(url, param) -> MediaBytes, image_from_bytes(bytes, param) ->
// MediaPixels, image_preprocess_key() -> BlockHash (ImageLoader, MediaItemLoader). Throws the
// loader's RequestErrors.
template <typename Loader>
LoadedImage load_image_cached(ProcessedMediaCache& cache, const Loader& loader, const std::string& url,
                              const std::string& param) {
  const MediaBytes bytes = loader.fetch_image_bytes(url, param);
  if (!cache.enabled()) return {loader.image_from_bytes(bytes, param), std::nullopt};
  const auto item = cache.get_or_make(ProcessedMediaCache::key(bytes.data, loader.image_preprocess_key()),
                                      [&] { return loader.image_from_bytes(bytes, param); });
  return {item->pixels, item->item_key};
}

}  // namespace vlm
