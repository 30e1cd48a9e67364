// A test-and-test-and-set spin lock for critical sections of a few instructions (the
// anti-replay commit). A futex-based mutex would cost more than the work it protects.
#pragma once

#include <atomic>

namespace espgw {

class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace espgw
