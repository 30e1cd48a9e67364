#include "daemon/heap_trimmer.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

#include "daemon/log.h"

namespace espgw::daemon {

namespace {

long resident_kib() {
  long pages = 0, resident = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(statm);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void trim_and_log() {
  const long before = resident_kib();
  const auto start = std::chrono::steady_clock::now();
  malloc_trim(0);
  const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
  const long after = resident_kib();
  // How long it took: each arena's lock is held while it is trimmed.
  log(LogLevel::info,
      "heap: %ld KiB of freed memory returned to the system in %.1f ms (resident %ld KiB)",
      before - after, took.count(), after);
}

}  // namespace

HeapTrimmer::HeapTrimmer(Options options, std::function<void()> trim)
    : options_(options), trim_(trim ? std::move(trim) : std::function<void()>(trim_and_log)) {}

bool HeapTrimmer::poll(uint64_t removed_total, uint64_t installed_total, Clock::time_point now) {
  if (removed_total != removed_seen_ || installed_total != installed_seen_) {
    removed_seen_ = removed_total;
    installed_seen_ = installed_total;
    last_change_ = now;
    return false;
  }
  if (removed_total - removed_at_trim_ < options_.min_removed &&
      installed_total - installed_at_trim_ < options_.min_installed)
    return false;
  if (now - last_change_ < options_.quiet) return false;
  removed_at_trim_ = removed_total;
  installed_at_trim_ = installed_total;
  trim_();
  return true;
}

}  // namespace espgw::daemon
