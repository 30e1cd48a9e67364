#include "daemon/log.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace espgw::daemon {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};
const char* const kNames[] = {"error", "warn", "info", "debug"};
// syslog(3) priorities of the levels: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG.
const char* const kJournalPrefixes[] = {"<3>", "<4>", "<6>", "<7>"};

// systemd sets JOURNAL_STREAM to "DEVICE:INODE" of the stream it connected to stderr; a
// match (and not just the variable, which a child started from a shell under the unit
// would inherit) means that stderr goes to the journal.
bool stderr_is_journal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (!stream) return false;
  unsigned long long device = 0, inode = 0;
  if (std::sscanf(stream, "%llu:%llu", &device, &inode) != 2) return false;
  struct stat st;
  if (fstat(2, &st) != 0) return false;
  return st.st_dev == device && st.st_ino == inode;
}

bool on_journal() {
  static const bool journal = stderr_is_journal();
  return journal;
}
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

const char* journal_prefix(LogLevel level) {
  return on_journal() ? kJournalPrefixes[static_cast<int>(level)] : "";
}

void log(LogLevel level, const char* format, ...) {
  if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return;
  char message[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof message, format, args);
  va_end(args);
  // One fprintf per line keeps lines from different threads whole.
  if (on_journal()) {
    // The journal stamps every line itself and takes its priority from the "<N>" prefix.
    std::fprintf(stderr, "%s%s: %s\n", kJournalPrefixes[static_cast<int>(level)],
                 kNames[static_cast<int>(level)], message);
    return;
  }
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm local;
  gmtime_r(&now.tv_sec, &local);
  std::fprintf(stderr, "%02d:%02d:%02d.%03ld espgw %s: %s\n", local.tm_hour, local.tm_min,
               local.tm_sec, now.tv_nsec / 1000000, kNames[static_cast<int>(level)], message);
}

}  // namespace espgw::daemon
