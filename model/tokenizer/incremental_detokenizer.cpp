#include "model/tokenizer/incremental_detokenizer.h"

#include "model/tokenizer/utf8.h"

namespace vlm {
namespace {

constexpr size_t kPromptContext = 6;  // prompt ids kept as context (more if they decode to "")

bool ends_with_replacement(const std::string& s) { return s.ends_with(utf8::kReplacement); }

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special_tokens,
                                               std::span<const int32_t> prompt_ids)
    : tok_(tok), skip_special_(skip_special_tokens) {
  if (prompt_ids.empty()) return;
  size_t start = prompt_ids.size() > kPromptContext ? prompt_ids.size() - kPromptContext : 0;
  // The context must show some text and must not begin inside a character (a partial byte run
  // decodes to U+FFFD).
  std::string text = tok_.decode(prompt_ids.subspan(start), skip_special_);
  while ((text.empty() || text.starts_with(utf8::kReplacement)) && start > 0) {
    start = start > kPromptContext ? start - kPromptContext : 0;
    text = tok_.decode(prompt_ids.subspan(start), skip_special_);
  }
  if (text.empty()) return;  // the prompt shows nothing: generated text starts the output
  window_.assign(prompt_ids.begin() + static_cast<ptrdiff_t>(start), prompt_ids.end());
  read_ = window_.size();
  // A prompt ending inside a character (e.g. prompt + generated ids of a resumed sequence): its
  // last ids count as not yet emitted, so the character comes out whole once completed.
  while (ends_with_replacement(text) && read_ > 1) {
    --read_;
    text = tok_.decode(std::span(window_).first(read_), skip_special_);
  }
  prefix_text_ = std::move(text);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  window_.push_back(id);
  std::string text = tok_.decode(window_, skip_special_);
  if (ends_with_replacement(text)) return "";  // a character may still be completed
  std::string out;
  if (text.starts_with(prefix_text_)) {
    if (text.size() == prefix_text_.size()) return "";  // nothing new (e.g. a skipped token)
    out = text.substr(prefix_text_.size());
  } else {
    // A run of byte-fallback tokens turned invalid after a character of it was emitted (the
    // decoder then writes U+FFFD for every byte of the run, the emitted ones too): keep what
    // was emitted and decode the rest on its own.
    out = tok_.decode(std::span(window_).subspan(read_), skip_special_);
    text = prefix_text_ + out;
    if (out.empty()) return "";
  }
  // Slide: the ids just emitted become the prefix, unless they decode to nothing on their own.
  std::string emitted_alone = tok_.decode(std::span(window_).subspan(read_), skip_special_);
  if (!emitted_alone.empty() && !ends_with_replacement(emitted_alone)) {
    window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(read_));
    prefix_text_ = std::move(emitted_alone);
  } else {
    prefix_text_ = std::move(text);
  }
  read_ = window_.size();
  return out;
}

std::string IncrementalDetokenizer::flush() {
  if (read_ == window_.size()) return "";
  std::string text = tok_.decode(window_, skip_special_);
  std::string out;
  if (text.starts_with(prefix_text_)) {
    out = text.substr(prefix_text_.size());
  } else {  // a byte run turned invalid after part of it was emitted: see push()
    out = tok_.decode(std::span(window_).subspan(read_), skip_special_);
    text = prefix_text_ + out;
  }
  prefix_text_ = std::move(text);
  read_ = window_.size();
  return out;
}

}  // namespace vlm
