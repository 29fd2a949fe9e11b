// Strict base64 decoding (RFC 4648, standard alphabet, '=' padding) for data: URLs.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vlm {

// Decodes `in`; ASCII whitespace is skipped (line-wrapped payloads). Returns nullopt for any
// other character outside the alphabet, misplaced padding, or a length that is not a whole
// number of quanta. If the decoded size would exceed max_bytes, returns nullopt too.
std::optional<std::string> base64_decode(std::string_view in, size_t max_bytes = SIZE_MAX);
std::string base64_encode(std::string_view in);

}  // namespace vlm
