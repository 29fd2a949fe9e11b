// Comparison of secrets (the API key) in time that does not depend on where the first
// differing byte is, so a client cannot find the key a byte at a time by timing 401s.
#pragma once

#include <string_view>

namespace vlm {

// True when a == b. Reads every byte of `expected` whatever `given` is; the time depends only
// on expected.size() (the key's length is not treated as secret).
bool constant_time_equals(std::string_view given, std::string_view expected);

}  // namespace vlm
