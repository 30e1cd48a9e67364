#include "daemon/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>

namespace espgw::daemon {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
const char* const kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}

std::optional<LogLevel> parse_log_level(std::string_view name) {
  for (int i = 0; i < 4; ++i)
    if (name == kNames[i]) return static_cast<LogLevel>(i);
  return std::nullopt;
}

void log(LogLevel level, const char* format, ...) {
  if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return;
  char message[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm local;
  gmtime_r(&now.tv_sec, &local);
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%02d:%02d:%02d.%03ld espgw %s: %s\n", local.tm_hour, local.tm_min,
               local.tm_sec, now.tv_nsec / 1000000, kNames[static_cast<int>(level)], message);
}

}  // namespace espgw::daemon
