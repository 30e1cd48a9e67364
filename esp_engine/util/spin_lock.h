// A test-and-test-and-set spin lock for critical sections of a few instructions (the
// anti-replay commit, the release buffers). A futex-based mutex would cost more than the
// work it protects. After a while spinning it yields the CPU: with more busy threads than
// cores the holder may be descheduled, and spinning would only keep it off the CPU.
#pragma once

#include <sched.h>

#include <atomic>

namespace espgw {

class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins < kSpinsBeforeYield) {
          __builtin_ia32_pause();
        } else {
          sched_yield();
          spins = 0;
        }
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 128;
  std::atomic<bool> locked_{false};
};

}  // namespace espgw
