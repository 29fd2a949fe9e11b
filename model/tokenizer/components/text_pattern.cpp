#include "model/tokenizer/components/text_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "kernels/core/check.h"
#include "model/tokenizer/utf8.h"

namespace vlm {
namespace {

// One match-data block per thread: encode runs on several threads at once and PCRE2 match data
// must not be shared. One ovector pair is enough: only the whole match is read.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  return holder.md;
}

}  // namespace

TextPattern::TextPattern(TextPattern&& o) noexcept
    : literal_(std::move(o.literal_)), code_(o.code_), jit_(o.jit_) {
  o.code_ = nullptr;
}

TextPattern& TextPattern::operator=(TextPattern&& o) noexcept {
  if (this != &o) {
    if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
    literal_ = std::move(o.literal_);
    code_ = o.code_;
    jit_ = o.jit_;
    o.code_ = nullptr;
  }
  return *this;
}

TextPattern::~TextPattern() {
  if (code_) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

TextPattern TextPattern::literal(std::string text) {
  TextPattern p;
  p.literal_ = std::move(text);
  return p;
}

TextPattern TextPattern::regex(const std::string& pattern, const std::string& source,
                               const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw LoadError(source + ": " + where + ": regex /" + pattern + "/ does not compile at offset " +
                    std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg));
  }
  TextPattern p;
  p.code_ = code;
  p.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

TextPattern TextPattern::from_json(const nlohmann::json& j, const std::string& source,
                                   const std::string& where) {
  if (j.is_object() && j.size() == 1) {
    if (auto it = j.find("String"); it != j.end() && it->is_string())
      return literal(it->get<std::string>());
    if (auto it = j.find("Regex"); it != j.end() && it->is_string())
      return regex(it->get<std::string>(), source, where);
  }
  throw LoadError(source + ": " + where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}, got " +
                  j.dump());
}

void TextPattern::find_all(std::string_view text, std::vector<Match>& out) const {
  if (!code_) {
    if (literal_.empty()) return;
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size()))
      out.emplace_back(pos, pos + literal_.size());
    return;
  }
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), start, 0, md, nullptr)
                        : pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    VLM_CHECK(rc >= 0, "pcre2 match failed with code {}", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.emplace_back(ov[0], ov[1]);
    if (ov[1] > ov[0]) {
      start = ov[1];
    } else {  // empty match: step over one character
      if (ov[1] >= text.size()) break;
      start = ov[1] + utf8::lead_length(static_cast<uint8_t>(text[ov[1]]));
    }
  }
}

std::string TextPattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<Match> matches;
  find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace vlm
