// Streaming detokenization of one sequence: push() each generated id, get the text it adds.
//
// Scheme (the one vLLM and TGI use, with a guard): keep a short window of ids and an offset
// `read` into it; ids before `read` (the "prefix") were already emitted and their decode,
// prefix_text, is known. After a push the whole window is decoded; when that text extends
// prefix_text and does not end in U+FFFD (an incomplete UTF-8 sequence, which later ids may
// complete), the extension is emitted and the window slides: the ids just emitted become the new
// prefix. Decoding prefix and window the same way makes context-dependent decoder steps agree
// (SentencePiece's leading-space Strip, Metaspace's first token): they act on the prefix, not on
// the emitted text. Guard: the prefix never decodes to "" (all skipped special tokens), since
// then those steps would act on the new text; the window keeps older ids instead.
// Result: the concatenation of push() outputs and flush() equals
// decode(prompt + generated)[len(decode(prompt)):], i.e. decode(generated) without a prompt.
// One deliberate exception: when a run of byte-fallback tokens (<0xXX>) turns out invalid UTF-8
// after a complete character of it was already emitted, a whole decode writes U+FFFD for every
// byte of the run; the stream keeps the emitted character and writes U+FFFD for the rest (waiting
// for the end of every byte run instead would hold back CJK text for whole sentences).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace vlm {

class IncrementalDetokenizer {
 public:
  // `tok` must outlive this object. `prompt_ids`: the prompt, whose last tokens give the context
  // the first generated token is decoded in (e.g. "▁Hello" after a prompt is " Hello"). If the
  // prompt ends inside a UTF-8 character, its bytes come out with the character that completes it.
  IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens,
                         std::span<const int32_t> prompt_ids = {});

  // New text since the last call: only complete UTF-8 characters; "" while a character is
  // incomplete.
  std::string push(int32_t id);
  // Whatever is left at the end (incomplete sequences become U+FFFD, as a whole decode gives).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int32_t> window_;  // prefix ids [0, read_), then ids not yet emitted
  size_t read_ = 0;
  std::string prefix_text_;  // decode(window_[0, read_))
};

}  // namespace vlm
