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

// printf-style; a newline is added. On a terminal or in a file each line starts with the
// UTC time and "espgw LEVEL:"; when stderr is systemd's journal stream (the unit), with
// the level's syslog priority as "<N>" instead, and no time: the journal stamps lines.
void log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// "<N>" for LEVEL when stderr is the journal, "" otherwise: for lines written to stderr
// without log() (configuration errors), so that they too carry their priority.
const char* journal_prefix(LogLevel level);

}  // namespace espgw::daemon
