// Process-private futex wait/wake on a 32-bit atomic. std::atomic::wait in libstdc++ 12
// uses shared futexes, whose wake path pins the page (get_user_pages) on every call;
// private futexes skip that, and the pipeline wakes workers often.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace espgw {

// Sleeps while `word` still holds `expected` (returns at once otherwise, or spuriously).
inline void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

inline void futex_wake(std::atomic<uint32_t>& word, int waiters) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, waiters, nullptr,
          nullptr, 0);
}

}  // namespace espgw
