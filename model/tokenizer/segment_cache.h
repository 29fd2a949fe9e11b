// SegmentCache: the token ids of whole raw segments of encoded text, for Tokenizer::encode. A
// raw segment is the text between two added tokens (the first split, before normalization); its
// ids depend only on its bytes and on whether it starts the text (the pre-tokenizer's "first"
// flag), so reusing them is exact. A chat resends its whole history every turn, and the template
// separates the messages with added tokens (<|im_start|>, <|im_end|>, ...): every earlier
// message's segment is then a hit, and only the new turn is normalized, pre-tokenized and merged.
// Segments under min_bytes are not kept (the word cache covers them). LRU within a byte budget
// (keys + ids); thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/bpe_model.h"

namespace vlm {

class SegmentCache {
 public:
  SegmentCache(size_t max_bytes, size_t min_bytes) : max_bytes_(max_bytes), min_bytes_(min_bytes) {}
  bool keeps(std::string_view text) const { return text.size() >= min_bytes_ && text.size() <= max_bytes_ / 2; }
  // Appends the ids stored for (text, first) to `out`; false (nothing appended) when absent.
  bool lookup(std::string_view text, bool first, std::vector<int32_t>& out);
  void insert(std::string_view text, bool first, std::span<const int32_t> ids);
  void clear();
  size_t size() const;

 private:
  struct Entry {
    std::string text;
    bool first = false;
    std::vector<int32_t> ids;
    size_t bytes() const { return 2 * text.size() + ids.size() * sizeof(int32_t) + sizeof(Entry); }
  };
  using Index = StringMap<std::list<Entry>::iterator>;

  const size_t max_bytes_, min_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  Index index_[2];        // by `first`
  size_t bytes_ = 0;
};

}  // namespace vlm
