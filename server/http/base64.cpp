#include "server/http/base64.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace vlm {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_table() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr auto kTable = make_table();

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v'; }

}  // namespace

std::optional<std::string> base64_decode(std::string_view in, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(in.size() / 4 * 3, max_bytes));
  uint32_t acc = 0;
  int bits = 0, quantum = 0, padding = 0;
  for (char c : in) {
    if (is_space(c)) continue;
    if (c == '=') {
      // Padding only in the last quantum, after at least two symbols.
      if (quantum < 2) return std::nullopt;
      ++padding;
      ++quantum;
      if (quantum == 4) quantum = 0;
      continue;
    }
    if (padding > 0) return std::nullopt;  // data after padding
    const int8_t v = kTable[static_cast<unsigned char>(c)];
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    quantum = (quantum + 1) % 4;
    if (bits >= 8) {
      bits -= 8;
      if (out.size() >= max_bytes) return std::nullopt;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (quantum != 0 || padding > 2) return std::nullopt;
  // Leftover bits must be zero (canonical encoding is not required, but garbage is refused).
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(in[i]) << 16) | (static_cast<uint8_t>(in[i + 1]) << 8) |
                       static_cast<uint8_t>(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace vlm
