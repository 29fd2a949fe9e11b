// Logging through spdlog. One process-wide logger named "vlm"; level from --log-level.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace vlm {

// Sets the global level: "trace", "debug", "info", "warn", "error", "critical" or "off".
// Throws std::invalid_argument for any other name.
void set_log_level(const std::string& level);

}  // namespace vlm

#define VLM_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define VLM_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define VLM_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define VLM_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
