#include "engine/structured/regex_compiler.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/structured/utf8_ranges.h"

namespace vlm::structured {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument("regex: " + what); }

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, RegexOptions o) : b_(b), p_(p), o_(o) {}

  uint32_t parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    std::string_view body = p_;
    size_t end = p_.size();
    // A trailing unescaped $ (count the backslashes before it).
    if (end > i_ && p_[end - 1] == '$') {
      size_t k = end - 1, bs = 0;
      while (k > i_ && p_[k - 1] == '\\') --k, ++bs;
      if (bs % 2 == 0) end -= 1;
    }
    p_ = body.substr(0, end);
    const uint32_t r = alternation();
    if (i_ != p_.size()) refuse(std::string("unbalanced ')' at offset ") + std::to_string(i_));
    return r;
  }

 private:
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  uint32_t alternation() {
    std::vector<SymbolSeq> alts{concatenation()};
    while (more() && peek() == '|') {
      ++i_;
      alts.push_back(concatenation());
    }
    return b_.rule_of("regex", std::move(alts));
  }

  SymbolSeq concatenation() {
    SymbolSeq seq;
    while (more() && peek() != '|' && peek() != ')') {
      SymbolSeq atom_seq = atom();
      quantified(atom_seq);
      seq.insert(seq.end(), atom_seq.begin(), atom_seq.end());
    }
    return seq;
  }

  void quantified(SymbolSeq& x) {
    while (more()) {
      int64_t lo, hi;
      const char c = peek();
      if (c == '*') lo = 0, hi = -1, ++i_;
      else if (c == '+') lo = 1, hi = -1, ++i_;
      else if (c == '?') lo = 0, hi = 1, ++i_;
      else if (c == '{' && counted(lo, hi)) {}
      else return;
      if (more() && peek() == '?') ++i_;  // lazy: same language
      if (more() && peek() == '+') refuse("possessive quantifiers are not supported");
      x = {Symbol::ref(b_.repeat(x, lo, hi, "regex"))};
    }
  }

  // {n}, {n,}, {n,m}; false (and nothing consumed) when the brace is a literal.
  bool counted(int64_t& lo, int64_t& hi) {
    size_t j = i_ + 1;
    auto number = [&](int64_t& v) {
      const size_t s = j;
      v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && j - s < 7) v = v * 10 + (p_[j++] - '0');
      return j > s;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(hi)) hi = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    if (hi >= 0 && hi < lo) refuse("a repetition {n,m} with m < n");
    return true;
  }

  SymbolSeq atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        ++i_;
        if (more() && peek() == ':') {
          ++i_;
        } else if (more() && (peek() == 'P' || peek() == '<') && p_.substr(i_, 2) != "<=" && p_.substr(i_, 2) != "<!") {
          if (peek() == 'P') ++i_;
          if (!more() || peek() != '<') refuse("unsupported group syntax");
          while (more() && peek() != '>') ++i_;
          if (!more()) refuse("unterminated group name");
          ++i_;
        } else {
          refuse("lookaround and inline flags are not supported");
        }
      }
      const uint32_t r = alternation();
      if (!more() || peek() != ')') refuse("missing ')'");
      ++i_;
      return {Symbol::ref(r)};
    }
    if (c == '[') return cls(bracket());
    if (c == '.') {
      ++i_;
      CodeRanges any{{0, 0x10FFFF}};
      return cls(subtract(any, {{'\n', '\n'}}));
    }
    if (c == '^' || c == '$') refuse("anchors are only supported at the start and the end");
    if (c == '*' || c == '+' || c == '?') refuse(std::string("nothing to repeat before '") + c + "'");
    if (c == '\\') return cls(escape(false));
    return cls({{next_code_point(), next_code_point_last_}});
  }

  uint32_t next_code_point() {
    const size_t start = i_;
    const uint32_t cp = decode_utf8(p_, i_);
    if (i_ == start) refuse("invalid UTF-8 in the pattern");
    next_code_point_last_ = cp;
    return cp;
  }

  CodeRanges escape(bool in_class) {
    ++i_;  // the backslash
    if (!more()) refuse("a trailing backslash");
    const char c = p_[i_++];
    const CodeRanges digit{{'0', '9'}}, word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
        space{{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd': return digit;
      case 'D': return complement(digit);
      case 'w': return word;
      case 'W': return complement(word);
      case 's': return space;
      case 'S': return complement(space);
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 't': return {{'\t', '\t'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': return {{hex(2), last_hex_}};
      case 'u':
        if (more() && peek() == '{') {
          ++i_;
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos) refuse("unterminated \\u{...}");
          const uint32_t v = hex(close - i_);
          ++i_;
          return {{v, v}};
        }
        return {{hex(4), last_hex_}};
      default:
        break;
    }
    if (c == 'b' && in_class) return {{'\b', '\b'}};
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      refuse(std::string("the escape \\") + c + " is not supported");
    --i_;
    const uint32_t cp = next_code_point();
    return {{cp, cp}};
  }

  uint32_t hex(size_t digits) {
    if (digits == 0 || digits > 6 || i_ + digits > p_.size()) refuse("a bad hex escape");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char h = p_[i_++];
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) refuse("a bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > 0x10FFFF) refuse("a code point beyond U+10FFFF");
    last_hex_ = v;
    return v;
  }

  CodeRanges bracket() {
    ++i_;  // [
    bool negate = false;
    if (more() && peek() == '^') negate = true, ++i_;
    CodeRanges set;
    bool first = true;
    while (true) {
      if (!more()) refuse("unterminated character class");
      if (peek() == ']' && !first) break;
      first = false;
      CodeRanges item;
      if (peek() == '\\') item = escape(true);
      else if (peek() == '[' && p_.substr(i_, 2) == "[:") refuse("POSIX classes are not supported");
      else item = {{next_code_point(), next_code_point_last_}};
      // A range a-b (a single character on both sides).
      if (more() && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']' && item.size() == 1 &&
          item[0].first == item[0].second) {
        ++i_;
        CodeRanges hi = peek() == '\\' ? escape(true) : CodeRanges{{next_code_point(), next_code_point_last_}};
        if (hi.size() != 1 || hi[0].first != hi[0].second) refuse("a class range ending in a class escape");
        if (hi[0].first < item[0].first) refuse("a reversed class range");
        item = {{item[0].first, hi[0].first}};
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    ++i_;  // ]
    normalize(set);
    return negate ? complement(set) : set;
  }

  SymbolSeq cls(CodeRanges set) {
    normalize(set);
    if (o_.json_string_safe) set = subtract(set, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    return utf8_symbols(b_, set);
  }

  GrammarBuilder& b_;
  std::string_view p_;
  RegexOptions o_;
  size_t i_ = 0;
  uint32_t next_code_point_last_ = 0;
  uint32_t last_hex_ = 0;
};

}  // namespace

uint32_t compile_regex(GrammarBuilder& b, std::string_view pattern, RegexOptions options) {
  return RegexParser(b, pattern, options).parse();
}

std::string search_pattern_as_match(std::string_view pattern) {
  const bool start = !pattern.empty() && pattern[0] == '^';
  bool end = false;
  if (pattern.size() > (start ? 1u : 0u) && pattern.back() == '$') {
    size_t k = pattern.size() - 1, bs = 0;
    while (k > 0 && pattern[k - 1] == '\\') --k, ++bs;
    end = bs % 2 == 0;
  }
  const std::string_view core = pattern.substr(start ? 1 : 0, pattern.size() - (start ? 1 : 0) - (end ? 1 : 0));
  return std::string(start ? "" : ".*") + "(?:" + std::string(core) + ")" + (end ? "" : ".*");
}

}  // namespace vlm::structured
