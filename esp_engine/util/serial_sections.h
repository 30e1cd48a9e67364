// Opt-in timing of the sections that one SA serialises: whatever two threads sharing the
// SA cannot do at the same time (its sequence number, its replay commit, its release
// lock, its delivery). A benchmark turns it on to measure the serial time per packet that
// bounds how far one SA scales over cores (Amdahl); off, each section costs one relaxed
// load of a flag that nobody writes, and a branch.
//
// Per section it counts entries, the cycles spent acquiring the lock (waiting for another
// holder, and fetching the lock's cache line from another CPU), the cycles held, and the
// hand-overs: entries whose previous holder of that lock was another thread, each of which
// moves the lock's line (and the state it guards) between caches.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace espgw::serial_sections {

enum class Section : uint8_t {
  sequence,       // OutboundSa::take_sequence: the number and the SA's counters
  replay_commit,  // ReplayWindow::commit / commit_each: the window and inbound counters
  release_lock,   // OrderedRelease: staging and ending a delivery, under the channel's lock
  delivery,       // OrderedRelease: the sink's call, one thread at a time per channel
  count
};
inline constexpr size_t kSections = static_cast<size_t>(Section::count);
const char* name(Section section);

struct Totals {
  uint64_t entries[kSections] = {};
  uint64_t acquire_cycles[kSections] = {};
  uint64_t hold_cycles[kSections] = {};
  uint64_t handovers[kSections] = {};
};

// Not for production: the timing and the hand-over table add work and shared writes.
void set_enabled(bool enabled);
inline std::atomic<bool> g_enabled{false};
inline bool enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}
// Sums over every thread that recorded anything; reset() zeroes it (no thread timing).
Totals totals();
void reset();
// Time stamp counter ticks per nanosecond, measured once against the steady clock.
double ticks_per_ns();

inline uint64_t now_ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return 0;
#endif
}

void record(Section section, const void* lock, uint64_t start, uint64_t acquired, uint64_t end);

// Times one section: construct it before taking the lock, call acquired() once it is
// held, and let it go out of scope after the lock is released.
class Timer {
 public:
  Timer(Section section, const void* lock)
      : section_(section), lock_(lock), start_(enabled() ? now_ticks() : 0) {}
  void acquired() {
    if (start_ != 0) acquired_ = now_ticks();
  }
  ~Timer() {
    if (start_ != 0) record(section_, lock_, start_, acquired_ ? acquired_ : start_, now_ticks());
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  const Section section_;
  const void* const lock_;
  const uint64_t start_;
  uint64_t acquired_ = 0;
};

}  // namespace espgw::serial_sections
