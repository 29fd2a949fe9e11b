#include "model/chat/jinja/builtins/py_string.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace vlm::jinja::py {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &c);
    if (n <= 0) {  // invalid byte: U+FFFD, skip one byte
      out.push_back(0xFFFD);
      n = 1;
    } else {
      out.push_back(static_cast<char32_t>(c));
    }
    p += n;
    left -= n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  if (n <= 0) n = utf8proc_encode_char(0xFFFD, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

int64_t num_code_points(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  switch (c) {
    case ' ': case '\t': case '\n': case '\v': case '\f': case '\r':
    case 0x1C: case 0x1D: case 0x1E: case 0x1F: case 0x85: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}
// Byte offset -> code point index.
int64_t cp_index(std::string_view s, size_t byte_pos) {
  return num_code_points(s.substr(0, byte_pos));
}

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  std::u32string u = decode_utf8(s);
  std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_space(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strippable(u[b])) ++b;
  if (right)
    while (e > b && strippable(u[e - 1])) --e;
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  std::u32string u = decode_utf8(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && is_space(u[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(encode_utf8(std::u32string_view(u).substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !is_space(u[j])) ++j;
      parts.push_back(encode_utf8(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
  } else {
    size_t e = u.size();
    while (true) {
      while (e > 0 && is_space(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(encode_utf8(std::u32string_view(u).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !is_space(u[b - 1])) --b;
      parts.push_back(encode_utf8(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode_utf8(s);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (!is_break(u[i])) {
      ++i;
      continue;
    }
    size_t eol = i;
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    ++i;
    lines.push_back(encode_utf8(std::u32string_view(u).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < u.size()) lines.push_back(encode_utf8(std::u32string_view(u).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      if (i < u.size()) append_utf8(out, u[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool from_right) {
  size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return cp_index(s, hit);
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return num_code_points(s) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size()))
    ++n;
  return n;
}

std::string repr(std::string_view s) {
  std::u32string u = decode_utf8(s);
  bool has_single = u.find(U'\'') != std::u32string::npos;
  bool has_double = u.find(U'"') != std::u32string::npos;
  char32_t quote = has_single && !has_double ? U'"' : U'\'';
  std::string out(1, static_cast<char>(quote));
  char buf[16];
  for (char32_t c : u) {
    if (c == quote || c == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else {
      auto k = category(c);
      bool printable = !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
                         k == UTF8PROC_CATEGORY_CS || k == UTF8PROC_CATEGORY_CO ||
                         k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZL ||
                         k == UTF8PROC_CATEGORY_ZP || k == UTF8PROC_CATEGORY_ZS);
      if (printable) {
        append_utf8(out, c);
      } else {
        const char* fmt = c <= 0xFF ? "\\x%02x" : c <= 0xFFFF ? "\\u%04x" : "\\U%08x";
        std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(c));
        out += buf;
      }
    }
  }
  out.push_back(static_cast<char>(quote));
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  int exp = std::stoi(sci.substr(e_pos + 1));
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() < int_len) digits.append(int_len - digits.size(), '0');
      out += digits.substr(0, int_len);
      out.push_back('.');
      out += digits.size() > int_len ? digits.substr(int_len) : "0";
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out += digits.substr(1);
    }
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += buf;
  }
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  char buf[16];
  out.push_back('"');
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c > 0xFFFF) {
            char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + static_cast<unsigned>(v >> 10),
                          0xDC00 + static_cast<unsigned>(v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace vlm::jinja::py
