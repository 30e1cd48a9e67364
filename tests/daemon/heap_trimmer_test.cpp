// When the heap trimmer returns memory: after enough SAs were removed or installed, once
// changes have stopped for the quiet time, once per burst.
#include "daemon/heap_trimmer.h"

#include <gtest/gtest.h>

namespace espgw::daemon {
namespace {

using std::chrono::milliseconds;

TEST(HeapTrimmerTest, TrimsOnceAfterABurstOfRemovalsHasGoneQuiet) {
  unsigned trims = 0;
  HeapTrimmer trimmer({.min_removed = 100, .quiet = milliseconds(1000)}, [&] { ++trims; });
  const auto t0 = HeapTrimmer::Clock::now();
  EXPECT_FALSE(trimmer.poll(0, t0));
  EXPECT_FALSE(trimmer.poll(0, t0 + milliseconds(5000))) << "nothing removed";
  // Removals stream in: never while they continue.
  for (int i = 1; i <= 20; ++i) EXPECT_FALSE(trimmer.poll(10u * i, t0 + milliseconds(100 * i)));
  EXPECT_FALSE(trimmer.poll(200, t0 + milliseconds(2900))) << "not quiet for long enough";
  EXPECT_TRUE(trimmer.poll(200, t0 + milliseconds(3000)));
  EXPECT_EQ(trims, 1u);
  EXPECT_FALSE(trimmer.poll(200, t0 + milliseconds(9000))) << "once per burst";
  EXPECT_EQ(trims, 1u);
}

TEST(HeapTrimmerTest, AFewRemovalsDoNotTrim) {
  unsigned trims = 0;
  HeapTrimmer trimmer({.min_removed = 100, .quiet = milliseconds(1000)}, [&] { ++trims; });
  const auto t0 = HeapTrimmer::Clock::now();
  EXPECT_FALSE(trimmer.poll(99, t0));
  EXPECT_FALSE(trimmer.poll(99, t0 + milliseconds(10000)));
  // They add up across bursts.
  EXPECT_FALSE(trimmer.poll(100, t0 + milliseconds(11000)));
  EXPECT_TRUE(trimmer.poll(100, t0 + milliseconds(12000)));
  EXPECT_EQ(trims, 1u);
}

TEST(HeapTrimmerTest, TrimsOnceAfterABurstOfInstallsHasGoneQuiet) {
  unsigned trims = 0;
  HeapTrimmer trimmer({.min_removed = 100, .min_installed = 100, .quiet = milliseconds(1000)},
                      [&] { ++trims; });
  const auto t0 = HeapTrimmer::Clock::now();
  EXPECT_FALSE(trimmer.poll(0, 0, t0));
  for (int i = 1; i <= 20; ++i) EXPECT_FALSE(trimmer.poll(0, 10u * i, t0 + milliseconds(100 * i)));
  EXPECT_FALSE(trimmer.poll(0, 200, t0 + milliseconds(2900))) << "not quiet for long enough";
  EXPECT_TRUE(trimmer.poll(0, 200, t0 + milliseconds(3000)));
  EXPECT_EQ(trims, 1u);
  EXPECT_FALSE(trimmer.poll(0, 200, t0 + milliseconds(9000))) << "once per burst";
  EXPECT_FALSE(trimmer.poll(0, 299, t0 + milliseconds(9100)));
  EXPECT_FALSE(trimmer.poll(0, 299, t0 + milliseconds(20000))) << "99 more are not a burst";
  EXPECT_EQ(trims, 1u);
}

TEST(HeapTrimmerTest, AnInstallKeepsARemovalBurstFromTrimmingUntilQuiet) {
  unsigned trims = 0;
  HeapTrimmer trimmer({.min_removed = 100, .min_installed = 100, .quiet = milliseconds(1000)},
                      [&] { ++trims; });
  const auto t0 = HeapTrimmer::Clock::now();
  EXPECT_FALSE(trimmer.poll(0, 0, t0));
  EXPECT_FALSE(trimmer.poll(150, 0, t0 + milliseconds(100)));
  EXPECT_FALSE(trimmer.poll(150, 1, t0 + milliseconds(1000))) << "a rekey's install: not quiet";
  EXPECT_FALSE(trimmer.poll(150, 1, t0 + milliseconds(1900)));
  EXPECT_TRUE(trimmer.poll(150, 1, t0 + milliseconds(2000)));
  EXPECT_EQ(trims, 1u);
}

TEST(HeapTrimmerTest, TheDefaultTrimRuns) {
  HeapTrimmer trimmer({.min_removed = 1, .quiet = milliseconds(0)});
  const auto t0 = HeapTrimmer::Clock::now();
  EXPECT_FALSE(trimmer.poll(1, t0));
  EXPECT_TRUE(trimmer.poll(1, t0));  // malloc_trim(0): must not disturb anything
}

}  // namespace
}  // namespace espgw::daemon
