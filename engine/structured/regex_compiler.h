// Regular expressions -> grammar rules over UTF-8 bytes (a regular language is a grammar without
// recursion; the matcher then needs no second automaton).
//
// Supported (the common subset of Python re / ECMAScript): literals, `.` (any character but a
// newline), classes `[...]` with ranges and negation, escapes \d \D \w \W \s \S \n \r \t \f \v
// \0 \xHH \uHHHH \u{H...} and escaped punctuation, groups `(...)`, `(?:...)`, `(?P<n>...)`,
// `(?<n>...)`, alternation `|`, quantifiers `* + ? {n} {n,} {n,m}` (a lazy `?` after them is
// accepted: it does not change the language). `^` at the very start and `$` at the very end are
// accepted (the match is always whole). Everything else (backreferences, lookaround, \b,
// possessive quantifiers, inline flags, anchors elsewhere) is refused with std::invalid_argument
// naming it, never matched loosely.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/structured/grammar.h"

namespace vlm::structured {

struct RegexOptions {
  // Inside a JSON string: leave out `"`, `\` and control characters (they would need escapes),
  // so the raw bytes matched are the string's value as written.
  bool json_string_safe = false;
};

// Adds the rules of `pattern` to `b` and returns the rule matching exactly the pattern's
// language. Throws std::invalid_argument for a pattern outside the subset.
uint32_t compile_regex(GrammarBuilder& b, std::string_view pattern, RegexOptions options = {});

// The regex of a JSON Schema `pattern` (an unanchored search): `.*` added on each side that is not
// anchored with ^ / $.
std::string search_pattern_as_match(std::string_view pattern);

}  // namespace vlm::structured
