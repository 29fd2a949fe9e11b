// Incremental detokenization, as the engine needs it: one TextDecoder per generated sequence
// turns token ids into UTF-8 text deltas. The tokenizer (model/tokenizer, issue 3) implements
// the factory; tests use a fake one mapping ids to fixed strings. The engine only ever
// concatenates deltas, so a decoder may hold back bytes until they form complete characters.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace vlm {

class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // Appends one generated token; returns the text completed by it (complete UTF-8 only;
  // possibly empty, e.g. for a special token skipped or the first bytes of a character).
  virtual std::string push(int32_t token_id) = 0;
  // At the end of the sequence: whatever is still held back (an incomplete UTF-8 tail comes out
  // as U+FFFD). Default: nothing.
  virtual std::string flush() { return {}; }
};

class TextDecoderFactory {
 public:
  virtual ~TextDecoderFactory() = default;
  // A decoder for one sequence. prompt_ids: the prompt, context for tokenizers whose first
  // output piece depends on the token before it. Thread-safe (called from the engine thread and
  // possibly others).
  virtual std::unique_ptr<TextDecoder> make(std::span<const int32_t> prompt_ids,
                                            bool skip_special_tokens) const = 0;
};

}  // namespace vlm
