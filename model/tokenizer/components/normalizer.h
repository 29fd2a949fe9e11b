// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD (utf8proc), Lowercase,
// Strip, StripAccents, Replace, Prepend and Sequence, with the semantics of Hugging Face
// tokenizers. Offsets are not tracked: the server needs ids, not alignments.
// Known difference: Lowercase maps one code point to one (utf8proc_tolower), where Rust's
// to_lowercase turns U+0130 'İ' into two ("i̇"); no tokenizer tested here lowercases.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace vlm {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place; the result is valid UTF-8.
  virtual void normalize(std::string& text) const = 0;

  // Builds the normalizer described by `j`; null gives nullptr. Throws LoadError
  // "source: normalizer type 'X' is not supported" for an unknown type, and for malformed fields.
  static std::unique_ptr<Normalizer> from_json(const nlohmann::json& j, const std::string& source);
};

}  // namespace vlm
