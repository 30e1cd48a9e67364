// The timing of the sections one SA serialises (util/serial_sections.h), which the
// pipeline benchmark turns into a serial time per packet and a projected speed-up: every
// entry counted once, hand-overs between threads seen, nothing recorded while off.
#include "util/serial_sections.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "esp/replay_window.h"
#include "util/spin_lock.h"

namespace espgw {
namespace {

namespace serial = serial_sections;

size_t index_of(serial::Section section) {
  return static_cast<size_t>(section);
}

// Turns the timing on for one test and off again, whatever the test does.
class SerialSectionsOn {
 public:
  SerialSectionsOn() {
    serial::reset();
    serial::set_enabled(true);
  }
  ~SerialSectionsOn() {
    serial::set_enabled(false);
    serial::reset();
  }
};

TEST(SerialSections, RecordNothingWhileOff) {
  serial::set_enabled(false);
  serial::reset();
  SpinLock lock;
  for (int i = 0; i < 100; ++i) {
    serial::Timer timer(serial::Section::sequence, &lock);
    std::lock_guard guard(lock);
    timer.acquired();
  }
  EXPECT_EQ(serial::totals().entries[index_of(serial::Section::sequence)], 0u);
}

TEST(SerialSectionsConcurrent, CountEveryEntryOfThreadsSharingALockAndTheirHandOvers) {
  SerialSectionsOn on;
  SpinLock lock;
  uint64_t shared_counter = 0;  // guarded by lock
  constexpr int kThreads = 4;
  constexpr int kEntries = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kEntries; ++i) {
        serial::Timer timer(serial::Section::release_lock, &lock);
        std::lock_guard guard(lock);
        timer.acquired();
        ++shared_counter;
      }
    });
  for (auto& thread : threads) thread.join();
  const serial::Totals totals = serial::totals();
  const size_t s = index_of(serial::Section::release_lock);
  EXPECT_EQ(shared_counter, uint64_t{kThreads} * kEntries);
  EXPECT_EQ(totals.entries[s], uint64_t{kThreads} * kEntries);
  EXPECT_GT(totals.hold_cycles[s], 0u);
  // Each thread's first entry at least is a hand-over; never more than one per entry.
  EXPECT_GE(totals.handovers[s], uint64_t{kThreads});
  EXPECT_LE(totals.handovers[s], totals.entries[s]);
  EXPECT_EQ(totals.entries[index_of(serial::Section::sequence)], 0u);
}

TEST(SerialSectionsConcurrent, ReplayCommitsAreCountedOncePerAcquisitionAndStayExact) {
  SerialSectionsOn on;
  // Wider than every number committed: however far one thread runs ahead, the other's
  // first commit of a number is inside the window, so each is accepted exactly once.
  esp::ReplayWindow window(8192, false);
  constexpr int kThreads = 2;
  constexpr uint64_t kPerThread = 4000;
  std::atomic<uint64_t> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      // Each number from both threads: the window accepts each exactly once.
      for (uint64_t i = 1; i <= kPerThread; ++i)
        if (window.commit(i) == esp::ReplayWindow::Verdict::accept)
          accepted.fetch_add(1, std::memory_order_relaxed);
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(accepted.load(), kPerThread);
  EXPECT_EQ(serial::totals().entries[index_of(serial::Section::replay_commit)],
            kThreads * kPerThread);
}

}  // namespace
}  // namespace espgw
