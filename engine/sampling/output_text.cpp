#include "engine/sampling/output_text.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {

OutputText::OutputText(std::unique_ptr<TextDecoder> decoder, std::vector<std::string> stop,
                       bool include_stop_str_in_output)
    : decoder_(std::move(decoder)), stop_(std::move(stop)), include_stop_(include_stop_str_in_output) {
  for (const std::string& s : stop_) {
    VLM_CHECK(!s.empty(), "empty stop string");
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
}

namespace {
// Backs `n` off so that text[0, n) does not end inside a UTF-8 character.
size_t utf8_boundary(const std::string& text, size_t n) {
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}
}  // namespace

OutputText::Delta OutputText::push(int32_t token_id) {
  VLM_CHECK(!stopped_, "token after a stop string");
  Delta d;
  if (!decoder_) return d;
  const std::string piece = decoder_->push(token_id);
  const size_t old_size = text_.size();
  text_ += piece;
  if (!stop_.empty() && !piece.empty()) {
    // A new match must end inside the new piece: search from max_stop_len - 1 bytes before it.
    const size_t from = old_size >= max_stop_len_ - 1 ? old_size - (max_stop_len_ - 1) : 0;
    size_t best = std::string::npos;
    const std::string* hit = nullptr;
    for (const std::string& s : stop_) {
      const size_t at = text_.find(s, from);
      if (at != std::string::npos && (at < best || (at == best && s.size() > hit->size()))) {
        best = at;
        hit = &s;
      }
    }
    if (hit) {
      stopped_ = true;
      d.stop = *hit;
      text_.resize(include_stop_ ? best + hit->size() : best);
      d.text = text_.substr(std::min(emitted_, text_.size()));
      emitted_ = text_.size();
      return d;
    }
  }
  // Hold back the tail that could still begin a stop string.
  size_t safe = text_.size();
  if (max_stop_len_ > 1) safe = utf8_boundary(text_, text_.size() >= max_stop_len_ - 1 ? text_.size() - (max_stop_len_ - 1) : 0);
  if (safe > emitted_) {
    d.text = text_.substr(emitted_, safe - emitted_);
    emitted_ = safe;
  }
  return d;
}

std::string OutputText::finish() {
  if (!decoder_ || stopped_) return {};
  text_ += decoder_->flush();
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

}  // namespace vlm
