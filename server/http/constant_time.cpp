#include "server/http/constant_time.h"

#include <cstddef>
#include <cstdint>

namespace vlm {

bool constant_time_equals(std::string_view given, std::string_view expected) {
  // volatile: keeps the compiler from turning the loop into an early-exit memcmp.
  volatile uint8_t diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const uint8_t g = i < given.size() ? static_cast<uint8_t>(given[i]) : 0;
    diff = static_cast<uint8_t>(diff | (g ^ static_cast<uint8_t>(expected[i])));
  }
  return diff == 0;
}

}  // namespace vlm
