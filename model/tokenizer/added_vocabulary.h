// Added tokens (tokenizer.json "added_tokens", plus tokenizer_config.json
// "added_tokens_decoder"): matched in the input before normalization (normalized: false) or in
// each normalized piece (normalized: true), never split by the model, leftmost-longest. A match
// honors single_word (no word character on either side), lstrip (takes the whitespace before it)
// and rstrip (takes the whitespace after it), as Hugging Face tokenizers does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/bpe_model.h"

namespace vlm {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class AddedVocabulary {
 public:
  // A run of plain text [begin, end) (id == -1) or an added token covering [begin, end).
  struct Segment {
    size_t begin, end;
    int32_t id;
  };

  // Adds `token`, replacing an earlier one with the same id.
  void add(AddedToken token);
  // Builds the matchers; call after the last add(). Normalized tokens are matched by their
  // content passed through `normalizer` (may be null).
  void build(const Normalizer* normalizer);

  // Cuts `text` into plain runs and matches of the non-normalized tokens (normalized == false)
  // or of the normalized ones (true), appending to `out` in order. Empty runs are left out.
  void split(std::string_view text, bool normalized, std::vector<Segment>& out) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int64_t num_ids() const;  // max id + 1, 0 when empty

 private:
  // Byte trie over the token patterns; leftmost-longest search.
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                 // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at text[pos]: (token index, length) or (-1, 0).
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  StringMap<int32_t> by_content_;
  Trie raw_trie_, normalized_trie_;
  bool has_normalized_ = false;
};

}  // namespace vlm
