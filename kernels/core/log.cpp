#include "kernels/core/log.h"

#include <stdexcept>

namespace vlm {

void set_log_level(const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (parsed == spdlog::level::off && level != "off")
    throw std::invalid_argument("unknown log level '" + level +
                                "' (trace, debug, info, warn, error, critical, off)");
  spdlog::set_level(parsed);
}

}  // namespace vlm
