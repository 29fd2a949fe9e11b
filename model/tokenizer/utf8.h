// UTF-8 helpers shared by the tokenizer's phases. Facts used: the well-formed byte ranges of
// Unicode 15 Table 3-7, and the "maximal subpart" replacement rule (Unicode 15 section 3.9, the
// rule Rust's String::from_utf8_lossy and Python's errors="replace" follow).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vlm::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length in bytes of the well-formed sequence at s[i], or 0 when the bytes at i are not one
// (invalid lead byte, bad or missing continuation byte). Precondition: i < s.size().
size_t valid_sequence_length(std::string_view s, size_t i);

// Length of the longest prefix of `s` made of complete, well-formed sequences.
size_t valid_prefix_length(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix_length(s) == s.size(); }

// `s` with every maximal invalid subsequence replaced by one U+FFFD (a truncated sequence at the
// end is one such subsequence).
std::string to_valid_lossy(std::string_view s);

// Decodes the code point at s[i] and advances i past it. Precondition: s is valid UTF-8.
inline char32_t next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[i + k]) & 0x3F); };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    i += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    i += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    i += 4;
  }
  return cp;
}

// Length of the sequence whose lead byte is `lead` (1 for ASCII and for non-lead bytes).
inline size_t lead_length(uint8_t lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Code point of the last character of non-empty valid UTF-8 `s`.
char32_t last(std::string_view s);

void append(std::string& out, char32_t cp);

// Unicode White_Space property (what Rust's char::is_whitespace tests).
bool is_whitespace(char32_t cp);
// Letter or number (general category L* or N*): Rust's char::is_alphanumeric, as far as the
// categories go.
bool is_alphanumeric(char32_t cp);

}  // namespace vlm::utf8
