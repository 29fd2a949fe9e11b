// TokenVocabulary: a model's vocabulary as byte strings, arranged as a trie in preorder for the
// matcher's mask walk (engine/structured/grammar_matcher.h). Built once per tokenizer.
//
// Tokens that are never text (special added tokens, empty strings) are not in the trie: a
// constraint never allows them, except the EOS tokens, which are allowed exactly when the
// grammar accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vlm {
class Tokenizer;
}

namespace vlm::structured {

class TokenVocabulary {
 public:
  // bytes[id]: what token id spells; text[id]: false for tokens that are never text.
  // eos_ids: the tokens that end a generation.
  TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> text, std::vector<int32_t> eos_ids);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_text(int32_t id) const { return text_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

  // Trie node in preorder: `end` is one past the last node of its subtree; the tokens spelled by
  // the path to this node are node_tokens()[token_begin, token_end).
  struct Node {
    uint8_t byte = 0;
    uint32_t depth = 0;  // 1 for children of the (implicit) root
    uint32_t end = 0;
    uint32_t token_begin = 0, token_end = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& node_tokens() const { return node_tokens_; }
  // Words of a vocabulary bitmask ([ceil(size / 64)]).
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }

 private:
  std::vector<std::string> bytes_;
  std::vector<bool> text_;
  std::vector<int32_t> eos_ids_;
  std::vector<Node> nodes_;
  std::vector<int32_t> node_tokens_;
};

// The vocabulary of `tok` (Tokenizer::token_bytes; special added tokens are not text).
std::shared_ptr<const TokenVocabulary> vocabulary_of(const Tokenizer& tok, std::vector<int32_t> eos_ids);

}  // namespace vlm::structured
