// Python str semantics on UTF-8 std::string, for the Jinja interpreter: Python counts, indexes
// and slices strings by code point, and its whitespace, case mapping, repr() and json.dumps()
// rules differ from the C library's. Invalid UTF-8 decodes to U+FFFD.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vlm::jinja::py {

std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
int64_t num_code_points(std::string_view s);

// str.isspace() for one code point (Unicode White_Space plus the \x1c-\x1f separators).
bool is_space(char32_t c);

// str.strip/lstrip/rstrip: chars == nullopt strips whitespace, else any code point of chars.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split(sep, maxsplit) and str.rsplit: sep == nullopt splits on whitespace runs and drops
// empty parts. Precondition: sep is not empty (the caller raises ValueError).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right = false);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0 replaces all. An empty old inserts between code points.
std::string replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count);
// str.find/rfind: code point index or -1. str.count: non-overlapping occurrences.
int64_t find(std::string_view s, std::string_view sub, bool from_right = false);
int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string jinja_title(std::string_view s); // Jinja's |title filter (words split at -\s({[<)
bool is_alpha(std::string_view s);
bool is_digit(std::string_view s);
bool is_alnum(std::string_view s);
bool is_space_str(std::string_view s);
bool is_upper(std::string_view s);
bool is_lower(std::string_view s);

// repr(str): quotes and escapes like CPython.
std::string repr(std::string_view s);
// repr(float): shortest round-trip digits, fixed notation for exponents in [-4, 16).
std::string float_repr(double v);
// A JSON string literal as Python's json.dumps writes it.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace vlm::jinja::py
