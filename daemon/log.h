// Levelled logging to stderr. Keys and key material never go through here: SA logging
// names SPIs, algorithms and addresses only.
#pragma once

#include <optional>
#include <string_view>

namespace espgw::daemon {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
std::optional<LogLevel> parse_log_level(std::string_view name);

// printf-style; a newline is added.
void log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace espgw::daemon
