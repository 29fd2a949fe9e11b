// The byte-level alphabet of GPT-2 style BPE (GPT-2's bytes_to_unicode, also used by Llama-3 and
// Qwen2): every byte stands for one printable code point. Bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF stand for the code point of the same value; the other 68 bytes, in increasing
// order, for U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vlm::byte_level {

// UTF-8 of the code point that stands for byte `b`.
const std::string& char_of(uint8_t b);
// The byte that code point `cp` stands for, or -1 when it stands for none.
int byte_of(char32_t cp);
// Appends the alphabet's characters for every byte of `bytes`.
void append_chars(std::string_view bytes, std::string& out);

}  // namespace vlm::byte_level
