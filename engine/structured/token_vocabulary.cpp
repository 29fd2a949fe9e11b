#include "engine/structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "kernels/core/check.h"
#include "model/tokenizer/tokenizer.h"

namespace vlm::structured {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> text, std::vector<int32_t> eos_ids)
    : bytes_(std::move(bytes)), text_(std::move(text)), eos_ids_(std::move(eos_ids)) {
  VLM_CHECK(bytes_.size() == text_.size(), "vocabulary: {} byte strings, {} text flags", bytes_.size(), text_.size());
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (bytes_[i].empty()) text_[i] = false;
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (text_[i]) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b);
  });
  // Preorder from the sorted strings: a string adds the nodes below its common prefix with the
  // previous one; `path[d]` is the node at depth d + 1 of the current string.
  std::vector<uint32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    // Close the nodes of the previous string below the common prefix.
    for (size_t d = common; d < path.size(); ++d) nodes_[path[d]].end = static_cast<uint32_t>(nodes_.size());
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint32_t>(d + 1), 0, 0, 0});
    }
    Node& leaf = nodes_[path.back()];
    if (leaf.token_end == 0) leaf.token_begin = static_cast<uint32_t>(node_tokens_.size());
    node_tokens_.push_back(id);
    leaf.token_end = static_cast<uint32_t>(node_tokens_.size());
    prev = &s;
  }
  for (uint32_t n : path) nodes_[n].end = static_cast<uint32_t>(nodes_.size());
}

std::shared_ptr<const TokenVocabulary> vocabulary_of(const Tokenizer& tok, std::vector<int32_t> eos_ids) {
  const auto V = static_cast<size_t>(tok.vocab_size());
  std::vector<std::string> bytes(V);
  std::vector<bool> text(V);
  for (size_t i = 0; i < V; ++i) {
    const auto id = static_cast<int32_t>(i);
    bytes[i] = tok.token_bytes(id);
    text[i] = !tok.is_special(id);
  }
  return std::make_shared<TokenVocabulary>(std::move(bytes), std::move(text), std::move(eos_ids));
}

}  // namespace vlm::structured
