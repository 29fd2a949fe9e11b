#include "model/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "model/tokenizer/components/normalizer.h"
#include "model/tokenizer/utf8.h"

namespace vlm {

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (pattern.empty()) return;
  first_byte[static_cast<uint8_t>(pattern[0])] = true;
  int32_t node = 0;
  for (char ch : pattern) {
    const auto c = static_cast<uint8_t>(ch);
    auto& kids = nodes[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
    if (it != kids.end() && it->first == c) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(nodes.size());
      kids.insert(it, {c, next});
      nodes.emplace_back();
      node = next;
    }
  }
  if (nodes[node].token < 0) nodes[node].token = token;  // first added wins on identical content
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    const auto& kids = nodes[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
    if (it == kids.end() || it->first != c) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - pos};
  }
  return best;
}

void AddedVocabulary::add(AddedToken token) {
  if (auto it = by_id_.find(token.id); it != by_id_.end()) {
    tokens_[it->second] = std::move(token);
    return;
  }
  by_id_[token.id] = tokens_.size();
  tokens_.push_back(std::move(token));
}

void AddedVocabulary::build(const Normalizer* normalizer) {
  raw_trie_ = Trie{};
  normalized_trie_ = Trie{};
  by_content_.clear();
  has_normalized_ = false;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_content_.emplace(t.content, t.id);
    if (t.normalized) {
      std::string pattern = t.content;
      if (normalizer) normalizer->normalize(pattern);
      normalized_trie_.insert(pattern, static_cast<int32_t>(i));
      has_normalized_ = true;
    } else {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

namespace {

bool ends_with_word(std::string_view s) { return !s.empty() && (utf8::last(s) == '_' || utf8::is_alphanumeric(utf8::last(s))); }

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  const char32_t c = utf8::next(s, i);
  return c == '_' || utf8::is_alphanumeric(c);
}

// Start of the whitespace run that ends `s`.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t j = start;
    if (!utf8::is_whitespace(utf8::next(s, j))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!utf8::is_whitespace(utf8::next(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Segment>& out) const {
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  if (text.empty()) return;
  if (trie.nodes.size() == 1 || (normalized && !has_normalized_)) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t emitted = 0;  // text before this offset is in `out`
  size_t pos = 0;      // where the matcher resumes
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [index, len] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t start = pos, stop = pos + len;
    pos = stop;
    if (t.single_word && (ends_with_word(text.substr(0, start)) || starts_with_word(text.substr(stop))))
      continue;
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (t.rstrip) stop += leading_space_length(text.substr(stop));
    start = std::max(start, emitted);
    if (emitted < start) out.push_back({emitted, start, -1});
    out.push_back({start, stop, t.id});
    emitted = stop;
    pos = std::max(pos, stop);
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

int64_t AddedVocabulary::num_ids() const {
  int64_t n = 0;
  for (const AddedToken& t : tokens_) n = std::max<int64_t>(n, int64_t{t.id} + 1);
  return n;
}

}  // namespace vlm
