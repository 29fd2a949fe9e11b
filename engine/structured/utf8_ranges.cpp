#include "engine/structured/utf8_ranges.h"

#include <algorithm>

namespace vlm::structured {

void normalize(CodeRanges& r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  r = std::move(out);
}

CodeRanges complement(const CodeRanges& r) {
  CodeRanges all{{0, 0xD7FF}, {0xE000, 0x10FFFF}};
  return subtract(all, r);
}

CodeRanges subtract(const CodeRanges& a, const CodeRanges& b) {
  CodeRanges out, bb = b;
  normalize(bb);
  for (auto [lo, hi] : a) {
    for (const auto& [blo, bhi] : bb) {
      if (bhi < lo || blo > hi) continue;
      if (blo > lo) out.push_back({lo, blo - 1});
      if (bhi >= hi) {
        lo = 1, hi = 0;  // consumed
        break;
      }
      lo = bhi + 1;
    }
    if (lo <= hi) out.push_back({lo, hi});
  }
  normalize(out);
  return out;
}

uint32_t decode_utf8(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c >> 6) != 2) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  i += static_cast<size_t>(n);
  return cp;
}

namespace {

int encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) return out[0] = static_cast<uint8_t>(cp), 1;
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// [lo, hi] of one encoded length as sequences of byte ranges.
void split(uint32_t lo, uint32_t hi, std::vector<SymbolSeq>& out) {
  for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= bound && hi > bound) {
      split(lo, bound, out);
      split(bound + 1, hi, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], z[4];
  const int n = encode(lo, a);
  encode(hi, z);
  SymbolSeq seq;
  for (int k = 0; k < n; ++k) {
    ByteSet s;
    s.add_range(a[k], z[k]);
    seq.push_back(Symbol::set(s));
  }
  out.push_back(std::move(seq));
}

}  // namespace

void append_utf8(std::string& s, uint32_t cp) {
  uint8_t b[4];
  const int n = encode(cp, b);
  s.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

SymbolSeq utf8_symbols(GrammarBuilder& b, const CodeRanges& with_surrogates) {
  const CodeRanges set = subtract(with_surrogates, {{0xD800, 0xDFFF}});  // not characters
  if (set.empty()) return {Symbol::set(ByteSet{})};
  if (set.back().second < 0x80) {
    ByteSet s;
    for (const auto& [lo, hi] : set) s.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    return {Symbol::set(s)};
  }
  std::vector<SymbolSeq> alts;
  ByteSet ascii;
  for (auto [lo, hi] : set) {
    if (lo < 0x80) {
      ascii.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
      if (hi < 0x80) continue;
      lo = 0x80;
    }
    split(lo, hi, alts);
  }
  if (!ascii.empty()) alts.push_back({Symbol::set(ascii)});
  return {Symbol::ref(b.rule_of("char", std::move(alts)))};
}

}  // namespace vlm::structured
