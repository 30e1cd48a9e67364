// Hands freed heap memory back to the system once many SAs have gone and the control
// path has gone quiet. glibc keeps what the program frees (in the arena of the thread that
// allocated it) for later allocations, so after charon deleted thousands of SAs espgw's
// resident memory stays near its peak although the heap in use is back to where it was
// (docs/scaling.md, "Memory after every SA is removed"). malloc_trim(0) returns the free
// pages of every arena. It walks the whole heap, so it runs from the main loop, never on
// the data path, and only when a burst of removals is over.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace espgw::daemon {

class HeapTrimmer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    uint64_t min_removed = 1000;            // SAs removed since the last trim
    std::chrono::milliseconds quiet{1000};  // without a removal
  };
  // `trim` returns the heap's free memory to the system (the default: malloc_trim(0),
  // logging how much the resident set shrank); tests give their own.
  explicit HeapTrimmer(Options options, std::function<void()> trim = {});

  // Called from the main loop with the count of SAs removed so far (only grows). True
  // when it trimmed.
  bool poll(uint64_t removed_total, Clock::time_point now);

 private:
  const Options options_;
  const std::function<void()> trim_;
  uint64_t removed_at_trim_ = 0;
  uint64_t removed_seen_ = 0;
  Clock::time_point last_removal_{};
};

}  // namespace espgw::daemon
