// Sets of Unicode code points and their UTF-8 byte-level form: a code-point range becomes a few
// sequences of byte ranges (the usual split at encoding-length and continuation-byte
// boundaries), so a character class is a small rule of byte-set sequences.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/structured/grammar.h"

namespace vlm::structured {

using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive [first, second]

void normalize(CodeRanges& r);                                 // sorted, merged
CodeRanges complement(const CodeRanges& r);                    // within U+0000..U+10FFFF, no surrogates
CodeRanges subtract(const CodeRanges& a, const CodeRanges& b);
// Decodes one UTF-8 character at s[i] and advances i; leaves i unchanged on invalid input.
uint32_t decode_utf8(std::string_view s, size_t& i);
void append_utf8(std::string& s, uint32_t cp);
// A symbol sequence matching one character of `set` (a single byte set when the set is ASCII,
// else a reference to a new rule); an empty set gives a byte set that matches nothing.
SymbolSeq utf8_symbols(GrammarBuilder& b, const CodeRanges& set);

}  // namespace vlm::structured
