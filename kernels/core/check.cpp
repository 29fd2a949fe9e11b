#include "kernels/core/check.h"

namespace vlm {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  std::string what = fmt::format("{}:{}: check failed: {}", file, line, condition);
  if (!message.empty()) what += ": " + message;
  throw InternalError(what);
}

}  // namespace vlm
