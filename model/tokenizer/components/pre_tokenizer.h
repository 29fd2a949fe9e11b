// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): they cut normalized text into the words
// the model encodes one at a time. Supported: ByteLevel (add_prefix_space, use_regex), Split
// (String or Regex pattern, behavior Removed / Isolated / MergedWithPrevious / MergedWithNext /
// Contiguous, invert), Metaspace (replacement, prepend_scheme always / first / never, split),
// Digits, Whitespace, WhitespaceSplit and Sequence, with the semantics of Hugging Face tokenizers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/tokenizer/components/text_pattern.h"

namespace vlm {

struct PreToken {
  std::string text;
  // The piece begins at offset 0 of the original input (what Metaspace's prepend_scheme "first"
  // asks about).
  bool at_start = false;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Cuts `piece` at `matches` (sorted, non-overlapping [begin, end) byte ranges in piece.text; with
// `invert` the gaps count as the matches) per `behavior`, appending the non-empty results to `out`.
void split_pre_token(const PreToken& piece, const std::vector<TextPattern::Match>& matches,
                     SplitBehavior behavior, bool invert, std::vector<PreToken>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its sub-pieces (never empty ones). Thread-safe.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;

  // Builds the pre-tokenizer described by `j`; null gives nullptr. Throws LoadError
  // "source: pre_tokenizer type 'X' is not supported" for an unknown type, and for bad fields.
  static std::unique_ptr<PreTokenizer> from_json(const nlohmann::json& j, const std::string& source);
};

}  // namespace vlm
