// Clock readings as nanosecond counts, the unit the pipeline, the queue-delay gate and
// the kernel's receive timestamps are compared in.
#pragma once

#include <time.h>

#include <cstdint>

namespace espgw {

inline uint64_t to_ns(const timespec& ts) {
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC for intervals, CLOCK_REALTIME to compare with SO_TIMESTAMPNS stamps,
// the CPU-time clocks for benchmarks.
inline uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return to_ns(ts);
}

}  // namespace espgw
