// Hands freed heap memory back to the system once many SAs have come or gone and the
// control path has gone quiet. glibc keeps what the program frees (in the arena of the
// thread that allocated it) for later allocations, so after charon deleted thousands of
// SAs espgw's resident memory stays near its peak although the heap in use is back to
// where it was. An install burst leaves freed memory too, the control path's and the
// firewall sync's transient buffers: trimming after 10,000 installs returns a few MiB in
// well under a millisecond (docs/scaling.md, "Memory per SA, and after every SA is removed").
// malloc_trim(0) returns the free pages of every arena. It walks the whole heap, so it
// runs from the main loop, never on the data path, and only when a burst of removals or
// installs is over.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace espgw::daemon {

class HeapTrimmer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    uint64_t min_removed = 1000;            // SAs removed (or replaced) since the last trim,
    uint64_t min_installed = 1000;          // or SAs installed (or replaced) since then
    std::chrono::milliseconds quiet{1000};  // without a removal or an install
  };
  // `trim` returns the heap's free memory to the system (the default: malloc_trim(0),
  // logging how much the resident set shrank); tests give their own.
  explicit HeapTrimmer(Options options, std::function<void()> trim = {});

  // Called from the main loop with the counts of SAs removed and installed so far (both
  // only grow). True when it trimmed.
  bool poll(uint64_t removed_total, uint64_t installed_total, Clock::time_point now);
  // The same with no installs counted.
  bool poll(uint64_t removed_total, Clock::time_point now) {
    return poll(removed_total, installed_seen_, now);
  }

 private:
  const Options options_;
  const std::function<void()> trim_;
  uint64_t removed_at_trim_ = 0;
  uint64_t removed_seen_ = 0;
  uint64_t installed_at_trim_ = 0;
  uint64_t installed_seen_ = 0;
  Clock::time_point last_change_{};
};

}  // namespace espgw::daemon
