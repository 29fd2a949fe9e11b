#include "model/tokenizer/components/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace vlm::byte_level {
namespace {

struct Alphabet {
  std::array<std::string, 256> chars;
  std::array<int16_t, 512> bytes;  // code point -> byte; every code point used is < 0x144
  Alphabet() {
    bytes.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = self ? b : next++;
      utf8::append(chars[b], static_cast<char32_t>(cp));
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& char_of(uint8_t b) { return alphabet().chars[b]; }

int byte_of(char32_t cp) { return cp < 512 ? alphabet().bytes[cp] : -1; }

void append_chars(std::string_view bytes, std::string& out) {
  const Alphabet& a = alphabet();
  for (unsigned char b : bytes) out.append(a.chars[b]);
}

}  // namespace vlm::byte_level
