#include "engine/structured/ebnf_compiler.h"

#include <map>
#include <stdexcept>
#include <string>

#include "engine/structured/regex_compiler.h"
#include "engine/structured/utf8_ranges.h"

namespace vlm::structured {
namespace {

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view t) : t_(t) {}

  Grammar parse() {
    skip();
    while (more()) {
      const std::string name = identifier();
      if (name.empty()) fail("a rule name");
      skip();
      if (t_.substr(i_, 3) != "::=") fail("'::=' after '" + name + "'");
      i_ += 3;
      const uint32_t r = rule(name);
      if (defined_.count(name)) fail_msg("rule '" + name + "' is defined twice");
      defined_[name] = true;
      for (auto& a : alternatives()) b_.add_alternative(r, std::move(a));
      skip();
    }
    for (const auto& [name, id] : rules_)
      if (!defined_.count(name)) fail_msg("rule '" + name + "' is used but not defined");
    auto root = rules_.find("root");
    if (root == rules_.end()) fail_msg("the grammar has no 'root' rule");
    return b_.build(root->second);
  }

 private:
  [[noreturn]] void fail_msg(const std::string& m) { throw std::invalid_argument("grammar: " + m); }
  [[noreturn]] void fail(const std::string& expected) {
    fail_msg("expected " + expected + " at offset " + std::to_string(i_));
  }
  bool more() const { return i_ < t_.size(); }

  // Skips blanks, newlines and # comments.
  void skip() {
    while (more()) {
      const char c = t_[i_];
      if (c == '#') {
        while (more() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  std::string identifier() {
    const size_t s = i_;
    while (more() && name_char(t_[i_])) ++i_;
    return std::string(t_.substr(s, i_ - s));
  }

  uint32_t rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    const uint32_t r = b_.declare(name);
    rules_[name] = r;
    return r;
  }

  // True when the text at i_ starts a new rule definition (name ::=).
  bool at_definition() {
    size_t j = i_;
    while (j < t_.size() && name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t')) ++j;
    return t_.substr(j, 3) == "::=";
  }

  std::vector<SymbolSeq> alternatives() {
    std::vector<SymbolSeq> alts{sequence()};
    while (more() && t_[i_] == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    return alts;
  }

  SymbolSeq sequence() {
    SymbolSeq seq;
    while (true) {
      skip();
      if (!more() || t_[i_] == '|' || t_[i_] == ')' || at_definition()) return seq;
      SymbolSeq item = primary();
      quantifiers(item);
      seq.insert(seq.end(), item.begin(), item.end());
    }
  }

  void quantifiers(SymbolSeq& x) {
    while (more()) {
      int64_t lo = 0, hi = -1;
      const char c = t_[i_];
      if (c == '*') ++i_;
      else if (c == '+') lo = 1, ++i_;
      else if (c == '?') hi = 1, ++i_;
      else if (c == '{') {
        const size_t close = t_.find('}', i_);
        if (close == std::string_view::npos) fail("'}'");
        const std::string body(t_.substr(i_ + 1, close - i_ - 1));
        const size_t comma = body.find(',');
        try {
          lo = std::stoll(body.substr(0, comma));
          hi = comma == std::string::npos ? lo : (body.size() > comma + 1 ? std::stoll(body.substr(comma + 1)) : -1);
        } catch (const std::exception&) {
          fail("a repetition count {n,m}");
        }
        i_ = close + 1;
      } else {
        return;
      }
      x = {Symbol::ref(b_.repeat(x, lo, hi, "repeat"))};
    }
  }

  SymbolSeq primary() {
    const char c = t_[i_];
    if (c == '"') return literal();
    if (c == '[') {
      size_t j = i_ + 1;
      if (j < t_.size() && t_[j] == '^') ++j;
      if (j < t_.size() && t_[j] == ']') ++j;  // a leading ] is a member
      while (j < t_.size() && t_[j] != ']') j += t_[j] == '\\' ? 2 : 1;
      if (j >= t_.size()) fail("']'");
      const uint32_t r = compile_regex(b_, t_.substr(i_, j + 1 - i_));
      i_ = j + 1;
      return {Symbol::ref(r)};
    }
    if (c == '.') {
      ++i_;
      return {Symbol::ref(compile_regex(b_, "[\\s\\S]"))};
    }
    if (c == '(') {
      ++i_;
      const uint32_t g = b_.declare("group");
      for (auto& a : alternatives()) b_.add_alternative(g, std::move(a));
      skip();
      if (!more() || t_[i_] != ')') fail("')'");
      ++i_;
      return {Symbol::ref(g)};
    }
    const std::string name = identifier();
    if (name.empty()) fail("a literal, a class, a group or a rule name");
    return {Symbol::ref(rule(name))};
  }

  SymbolSeq literal() {
    ++i_;  // "
    std::string bytes;
    while (true) {
      if (!more()) fail("a closing '\"'");
      const char c = t_[i_++];
      if (c == '"') break;
      if (c != '\\') {
        bytes.push_back(c);
        continue;
      }
      if (!more()) fail("an escape");
      const char e = t_[i_++];
      uint32_t cp = 0;
      int digits = 0;
      switch (e) {
        case 'n': bytes += '\n'; continue;
        case 'r': bytes += '\r'; continue;
        case 't': bytes += '\t'; continue;
        case '\\': bytes += '\\'; continue;
        case '"': bytes += '"'; continue;
        case '\'': bytes += '\''; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: fail("a known escape");
      }
      for (int k = 0; k < digits; ++k) {
        if (!more()) fail("hex digits");
        const char h = t_[i_++];
        const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) fail("hex digits");
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      if (cp > 0x10FFFF) fail("a code point up to U+10FFFF");
      append_utf8(bytes, cp);
    }
    return GrammarBuilder::literal(bytes);
  }

  std::string_view t_;
  size_t i_ = 0;
  GrammarBuilder b_;
  std::map<std::string, uint32_t> rules_;
  std::map<std::string, bool> defined_;
};

}  // namespace

Grammar compile_ebnf(std::string_view text) { return EbnfParser(text).parse(); }

}  // namespace vlm::structured
