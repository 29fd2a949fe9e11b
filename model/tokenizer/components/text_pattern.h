// A search pattern of tokenizer.json: {"String": "literal"} or {"Regex": "..."} (Split
// pre-tokenizer, Replace normalizer and decoder). Regexes run on PCRE2 in UTF + UCP mode, JIT
// compiled where available, so \p{L}, \p{N}, \s and lookahead such as (?!\S) have their Unicode
// meaning. (Hugging Face tokenizers runs these patterns on Oniguruma; both follow Unicode
// properties, so results agree up to the Unicode versions of the two libraries.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vlm {

class TextPattern {
 public:
  using Match = std::pair<size_t, size_t>;  // [begin, end) byte offsets

  // Parses {"String": s} or {"Regex": r}. Throws LoadError "source: ..." naming `where` (the
  // component holding the pattern) when the pattern is malformed or does not compile.
  static TextPattern from_json(const nlohmann::json& j, const std::string& source,
                               const std::string& where);
  static TextPattern literal(std::string text);
  static TextPattern regex(const std::string& pattern, const std::string& source,
                           const std::string& where);

  TextPattern(TextPattern&&) noexcept;
  TextPattern& operator=(TextPattern&&) noexcept;
  TextPattern(const TextPattern&) = delete;
  TextPattern& operator=(const TextPattern&) = delete;
  ~TextPattern();

  // Appends the leftmost non-overlapping matches in `text` (valid UTF-8), in order. An empty
  // match is recorded and the search resumes one character later. An empty literal never matches.
  void find_all(std::string_view text, std::vector<Match>& out) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  TextPattern() = default;
  std::string literal_;
  void* code_ = nullptr;  // pcre2_code_8*, null for a literal
  bool jit_ = false;
};

}  // namespace vlm
