#include "model/chat/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "model/chat/jinja/error.h"
#include "model/chat/jinja/builtins/py_string.h"

namespace vlm::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Normalizes "\r\n" and "\r" to "\n" and drops one trailing newline.
std::string normalize(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out.push_back(in[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(normalize(source)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t n = src_.size();
    while (pos_ < n) {
      size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == n) {
        emit_text(std::move(text), pos_);
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
      size_t inner = start + 2 + (sign ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(inner) : 0;
      text = control_text(std::move(text), pos_, sign, kind != '{');
      emit_text(std::move(text), pos_);
      if (raw_end) {
        lex_raw(start, raw_end);
      } else if (kind == '#') {
        lex_comment(start, inner);
      } else {
        push(kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin, kind == '{' ? "{{" : "{%", start);
        pos_ = inner;
        lex_tag(kind == '{', start);
      }
    }
    push(TokenType::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& message, size_t at) const {
    auto [line, col] = position(at);
    throw Error(ErrorKind::kSyntax, message, line, col);
  }

  std::pair<int, int> position(size_t at) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at) - 1;
    size_t line_start = *it;
    int col = static_cast<int>(py::num_code_points(std::string_view(src_).substr(line_start, at - line_start)));
    return {static_cast<int>(it - line_starts_.begin()) + 1, col + 1};
  }

  void push(TokenType type, std::string text, size_t at) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    auto [line, col] = position(at);
    t.line = line;
    t.column = col;
    tokens_.push_back(std::move(t));
  }

  void emit_text(std::string text, size_t at) {
    if (!text.empty()) push(TokenType::kText, std::move(text), at);
  }

  // The next "{{", "{%" or "{#" at or after from, or the end of the source.
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return src_.size();
  }

  // Whitespace control of the text before a tag; text starts at text_pos in the source.
  std::string control_text(std::string text, size_t text_pos, char sign, bool block_or_comment) const {
    if (sign == '-') return py::strip(text, std::nullopt, false, true);
    if (sign == '+' || !opt_.lstrip_blocks || !block_or_comment) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    bool line_starting = text_pos == 0 || src_[text_pos - 1] == '\n';
    if (l_pos == 0 && !line_starting) return text;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return text;
    text.resize(l_pos);
    return text;
  }

  // After a block end "%}" at end_pos (one past it) with sign: skips whitespace per control.
  size_t after_block_end(size_t end_pos, char sign) const {
    if (sign == '-') {
      while (end_pos < src_.size() && is_ws(src_[end_pos])) ++end_pos;
    } else if (sign != '+' && opt_.trim_blocks && end_pos < src_.size() && src_[end_pos] == '\n') {
      ++end_pos;
    }
    return end_pos;
  }

  // If "{%[-+]? raw [-]?%}" starts a raw block (inner is past the sign), returns the position
  // one past its "%}", else 0.
  size_t match_raw_begin(size_t inner) const {
    size_t i = inner;
    while (i < src_.size() && is_ws(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && is_name_char(src_[i + 3]))) return 0;
    i += 3;
    while (i < src_.size() && is_ws(src_[i])) ++i;
    if (src_.compare(i, 3, "-%}") == 0) return i + 3;
    if (src_.compare(i, 2, "%}") == 0) return i + 2;
    return 0;
  }

  void lex_raw(size_t start, size_t begin_end) {
    size_t body = begin_end;
    if (src_[begin_end - 3] == '-')
      while (body < src_.size() && is_ws(src_[body])) ++body;
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (sign) ++j;
      while (j < src_.size() && is_ws(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_ws(src_[j])) ++j;
      char end_sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (src_.compare(j + (end_sign ? 1 : 0), 2, "%}") != 0) continue;
      emit_text(control_text(src_.substr(body, i - body), body, sign, true), body);
      pos_ = after_block_end(j + (end_sign ? 1 : 0) + 2, end_sign);
      return;
    }
    fail("missing end of raw directive", start);
  }

  void lex_comment(size_t start, size_t inner) {
    size_t end = src_.find("#}", inner);
    if (end == std::string::npos) fail("missing end of comment tag", start);
    char sign = end > inner && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    pos_ = after_block_end(end + 2, sign);
  }

  void lex_tag(bool is_var, size_t start) {
    std::vector<std::pair<char, size_t>> stack;  // open brackets and their positions
    size_t n = src_.size();
    while (true) {
      while (pos_ < n && is_ws(src_[pos_])) ++pos_;
      if (pos_ >= n) fail(is_var ? "unexpected end of template, missing '}}'" : "unexpected end of template, missing '%}'", start);
      if (stack.empty()) {
        if (is_var) {
          if (src_.compare(pos_, 3, "-}}") == 0 || src_.compare(pos_, 2, "}}") == 0) {
            bool strip = src_[pos_] == '-';
            push(TokenType::kVarEnd, "}}", pos_);
            pos_ += strip ? 3 : 2;
            if (strip)
              while (pos_ < n && is_ws(src_[pos_])) ++pos_;
            return;
          }
        } else {
          char sign = src_[pos_] == '-' || src_[pos_] == '+' ? src_[pos_] : 0;
          if (src_.compare(pos_ + (sign ? 1 : 0), 2, "%}") == 0) {
            push(TokenType::kBlockEnd, "%}", pos_);
            pos_ = after_block_end(pos_ + (sign ? 1 : 0) + 2, sign);
            return;
          }
        }
      }
      char c = src_[pos_];
      if (is_name_start(c)) {
        size_t b = pos_;
        while (pos_ < n && is_name_char(src_[pos_])) ++pos_;
        push(TokenType::kName, src_.substr(b, pos_ - b), b);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(stack);
      }
    }
  }

  void lex_number() {
    size_t b = pos_, n = src_.size();
    auto digits = [&](auto pred) {
      size_t s = pos_;
      while (pos_ < n && (pred(src_[pos_]) || (src_[pos_] == '_' && pos_ > s && pos_ + 1 < n && pred(src_[pos_ + 1]))))
        ++pos_;
      return pos_ > s;
    };
    if (src_[pos_] == '0' && pos_ + 1 < n && std::strchr("bBoOxX", src_[pos_ + 1])) {
      char p = static_cast<char>(src_[pos_ + 1] | 0x20);
      int base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      pos_ += 2;
      size_t s = pos_;
      if (pos_ < n && src_[pos_] == '_') ++pos_;
      if (!digits([base](char ch) { int v = hex_value(ch); return v >= 0 && v < base; })) fail("invalid integer literal", b);
      std::string ds;
      for (size_t i = s; i < pos_; ++i)
        if (src_[i] != '_') ds.push_back(src_[i]);
      try {
        push_number(b, false, std::stoll(ds, nullptr, base), 0.0);
      } catch (const std::out_of_range&) {
        fail("integer literal too large", b);
      }
      return;
    }
    digits(is_digit);
    bool is_float = false;
    if (pos_ + 1 < n && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      ++pos_;
      digits(is_digit);
      is_float = true;
    }
    if (pos_ < n && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_++;
      if (pos_ < n && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (digits(is_digit)) is_float = true;
      else pos_ = save;
    }
    std::string text;
    for (size_t i = b; i < pos_; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    if (is_float) {
      push_number(b, true, 0, std::strtod(text.c_str(), nullptr));  // overflow: inf, as Python's float()
    } else {
      try {
        push_number(b, false, std::stoll(text), 0.0);
      } catch (const std::out_of_range&) {
        fail("integer literal too large", b);
      }
    }
  }

  void push_number(size_t at, bool is_float, int64_t i, double d) {
    push(is_float ? TokenType::kFloat : TokenType::kInt, "", at);
    tokens_.back().int_value = i;
    tokens_.back().float_value = d;
  }

  // A quoted string with Python escapes (jinja2 decodes them with "unicode-escape").
  void lex_string() {
    size_t b = pos_, n = src_.size();
    char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= n) fail("unterminated string literal", b);
      char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= n) fail("unterminated string literal", b);
      char e = src_[pos_++];
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': case 'u': case 'U': {
          int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int k = 0; k < len; ++k) {
            int h = pos_ < n ? hex_value(src_[pos_]) : -1;
            if (h < 0) fail(std::string("invalid \\") + e + " escape in string literal", pos_ - 2 - k);
            v = v * 16 + static_cast<uint32_t>(h);
            ++pos_;
          }
          if (v > 0x10FFFF) fail("invalid \\U escape in string literal", pos_ - 10);
          py::append_utf8(out, v);
          break;
        }
        case 'N': fail("\\N{...} escapes are not supported", pos_ - 2);
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && pos_ < n && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
            py::append_utf8(out, v);
          } else {  // unknown escape: kept as written
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    push(TokenType::kString, std::move(out), b);
  }

  void lex_operator(std::vector<std::pair<char, size_t>>& stack) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        push(TokenType::kOperator, op, pos_);
        pos_ += 2;
        return;
      }
    }
    char c = src_[pos_];
    if (!std::strchr("+-*/%~[](){}<>=.:|,;", c)) {
      size_t len = 1;
      unsigned char u = static_cast<unsigned char>(c);
      if (u >= 0xC0) len = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : 2;
      fail("unexpected char '" + src_.substr(pos_, len) + "'", pos_);
    }
    if (c == '(' || c == '[' || c == '{') {
      stack.emplace_back(c, pos_);
    } else if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (stack.empty()) fail(std::string("unexpected '") + c + "'", pos_);
      if (stack.back().first != open) {
        char want = stack.back().first == '(' ? ')' : stack.back().first == '[' ? ']' : '}';
        fail(std::string("unexpected '") + c + "', expected '" + want + "'", pos_);
      }
      stack.pop_back();
    }
    push(TokenType::kOperator, std::string(1, c), pos_);
    ++pos_;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kText: return "template data";
    case TokenType::kVarBegin: return "begin of print statement";
    case TokenType::kVarEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "'" + token.text + "'";
    case TokenType::kString: return "string";
    case TokenType::kInt: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOperator: return "'" + token.text + "'";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

}  // namespace vlm::jinja
