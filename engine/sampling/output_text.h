// OutputText: the text of one generated sequence, with stop strings. Each token's text delta
// goes through push(); a stop string is found even when it spans several tokens. Text that could
// still turn out to be the start of a stop string is held back (at most the longest stop string
// minus one byte), so no emitted delta ever has to be taken back; on a match the text ends just
// before the stop string (or after it with include_stop_str_in_output), as in vLLM.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/text_decoder.h"

namespace vlm {

class OutputText {
 public:
  // decoder may be null: no text, and stop strings are never found.
  OutputText(std::unique_ptr<TextDecoder> decoder, std::vector<std::string> stop,
             bool include_stop_str_in_output);

  struct Delta {
    std::string text;                  // new text safe to emit
    std::optional<std::string> stop;   // the stop string matched by this token, if any
  };
  // The next generated token. After a stop match, further calls are an internal error.
  Delta push(int32_t token_id);
  // The sequence ended for another reason: the held-back text and the decoder's tail.
  std::string finish();

  bool has_decoder() const { return decoder_ != nullptr; }
  const std::string& text() const { return text_; }  // all text so far (emitted or held back)

 private:
  std::unique_ptr<TextDecoder> decoder_;
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t max_stop_len_ = 0;
  std::string text_;      // the whole output text
  size_t emitted_ = 0;    // bytes of text_ already returned
  bool stopped_ = false;
};

}  // namespace vlm
