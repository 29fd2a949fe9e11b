// Python's case mapping and character-class predicates of str (upper, lower, title,
// capitalize, isdigit, ...) on UTF-8, from utf8proc's Unicode tables plus the full mappings
// (SpecialCasing) Python applies.
#include <utf8proc.h>

#include "model/chat/jinja/builtins/py_string.h"

namespace vlm::jinja::py {
namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}
bool is_cased(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
char32_t to_upper_cp(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(c)); }
char32_t to_lower_cp(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(c)); }
char32_t to_title_cp(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(c)); }

// Python's full case mappings (Unicode SpecialCasing) where one code point becomes several,
// outside the Greek blocks (not covered: those map through the simple mappings).
struct SpecialCase {
  char32_t c;
  const char32_t* upper;
  const char32_t* title;
};
constexpr SpecialCase kSpecialCases[] = {
    {0xDF, U"SS", U"Ss"}, {0x149, U"\u02BCN", U"\u02BCN"}, {0x1F0, U"J\u030C", U"J\u030C"},
    {0x587, U"\u0535\u0552", U"\u0535\u0582"}, {0x1E96, U"H\u0331", U"H\u0331"},
    {0x1E97, U"T\u0308", U"T\u0308"}, {0x1E98, U"W\u030A", U"W\u030A"},
    {0x1E99, U"Y\u030A", U"Y\u030A"}, {0x1E9A, U"A\u02BE", U"A\u02BE"},
    {0xFB00, U"FF", U"Ff"}, {0xFB01, U"FI", U"Fi"}, {0xFB02, U"FL", U"Fl"},
    {0xFB03, U"FFI", U"Ffi"}, {0xFB04, U"FFL", U"Ffl"}, {0xFB05, U"ST", U"St"},
    {0xFB06, U"ST", U"St"}, {0xFB13, U"\u0544\u0546", U"\u0544\u0576"},
    {0xFB14, U"\u0544\u0535", U"\u0544\u0565"}, {0xFB15, U"\u0544\u053B", U"\u0544\u056B"},
    {0xFB16, U"\u054E\u0546", U"\u054E\u0576"}, {0xFB17, U"\u0544\u053D", U"\u0544\u056D"},
};

const SpecialCase* special_case(char32_t c) {
  for (const SpecialCase& s : kSpecialCases)
    if (s.c == c) return &s;
  return nullptr;
}

void append_upper(std::string& out, char32_t c) {
  if (const SpecialCase* s = special_case(c)) out += encode_utf8(s->upper);
  else append_utf8(out, to_upper_cp(c));
}

void append_title(std::string& out, char32_t c) {
  if (const SpecialCase* s = special_case(c)) out += encode_utf8(s->title);
  else append_utf8(out, to_title_cp(c));
}

bool case_ignorable(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK || c == '\'' || c == '.' ||
         c == ':' || c == 0x2019;
}

// Lowercase of u[i]: U+0130 becomes "i" + U+0307, and a capital sigma ending a word the final
// form (Python's str.lower()).
void append_lower(std::string& out, const std::u32string& u, size_t i) {
  char32_t c = u[i];
  if (c == 0x130) {
    out += "i\u0307";
    return;
  }
  if (c == 0x3A3) {
    auto cased_neighbor = [&](bool before) {
      for (size_t j = i; before ? j-- > 0 : ++j < u.size();) {
        if (case_ignorable(u[j])) continue;
        return is_cased(u[j]);
      }
      return false;
    };
    if (cased_neighbor(true) && !cased_neighbor(false)) {
      append_utf8(out, 0x3C2);
      return;
    }
  }
  append_utf8(out, to_lower_cp(c));
}

template <typename Pred>
bool all_of_nonempty(std::string_view s, Pred pred) {
  std::u32string u = decode_utf8(s);
  if (u.empty()) return false;
  for (char32_t c : u)
    if (!pred(c)) return false;
  return true;
}

}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  for (char32_t c : decode_utf8(s)) append_upper(out, c);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  std::u32string u = decode_utf8(s);
  for (size_t i = 0; i < u.size(); ++i) append_lower(out, u, i);
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  std::u32string u = decode_utf8(s);
  for (size_t i = 0; i < u.size(); ++i) {
    if (prev_cased) append_lower(out, u, i);
    else append_title(out, u[i]);
    prev_cased = is_cased(u[i]);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  std::u32string u = decode_utf8(s);
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) append_title(out, u[i]);
    else append_lower(out, u, i);
  }
  return out;
}

// Jinja's title: "".join(w[0].upper() + w[1:].lower() for each word split at [-\s({[<]+).
std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  std::u32string u = decode_utf8(s);
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c);
    if (sep) {
      append_utf8(out, c);
      word_start = true;
    } else {
      if (word_start) append_upper(out, c);
      else append_lower(out, u, i);
      word_start = false;
    }
  }
  return out;
}

bool is_alpha(std::string_view s) {
  return all_of_nonempty(s, [](char32_t c) {
    auto k = category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
  });
}
bool is_digit(std::string_view s) {
  return all_of_nonempty(s, [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; });
}
bool is_alnum(std::string_view s) {
  return all_of_nonempty(s, [](char32_t c) {
    auto k = category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
  });
}
bool is_space_str(std::string_view s) { return all_of_nonempty(s, is_space); }
bool is_upper(std::string_view s) {
  bool any = false;
  for (char32_t c : decode_utf8(s)) {
    auto k = category(c);
    if (k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT) return false;
    any |= k == UTF8PROC_CATEGORY_LU;
  }
  return any;
}
bool is_lower(std::string_view s) {
  bool any = false;
  for (char32_t c : decode_utf8(s)) {
    auto k = category(c);
    if (k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT) return false;
    any |= k == UTF8PROC_CATEGORY_LL;
  }
  return any;
}

}  // namespace vlm::jinja::py
