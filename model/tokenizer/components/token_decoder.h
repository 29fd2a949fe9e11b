// Decoders of tokenizer.json ("decoder"): they turn the token strings of an id sequence back into
// text. Supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, BPEDecoder and
// Sequence, with the semantics of Hugging Face tokenizers' decode_chain: each step maps the list
// of token strings to a new list, and the text is the concatenation of the last list.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace vlm {

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // Rewrites `tokens` in place (steps may merge tokens). Input strings are valid UTF-8, and so
  // are the outputs: byte tokens that do not form valid UTF-8 become U+FFFD (ByteLevel: one per
  // maximal invalid subsequence; ByteFallback: one per byte).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True when the chain maps tokens through the byte-level alphabet (GPT-2 style BPE).
  virtual bool byte_level() const { return false; }

  // Builds the decoder described by `j`; null gives nullptr. Throws LoadError
  // "source: decoder type 'X' is not supported" for an unknown type, and for bad fields.
  static std::unique_ptr<TokenDecoder> from_json(const nlohmann::json& j, const std::string& source);
};

}  // namespace vlm
