// Lifetime states: a limit is reached at equality, 0 means none, hard wins over soft.
#include "xfrm/lifetime.h"

#include <gtest/gtest.h>

namespace espgw::xfrm {
namespace {

TEST(Lifetime, NoLimitsIsAlwaysNone) {
  EXPECT_EQ(check({}, 0, 0, 0), LifetimeState::none);
  EXPECT_EQ(check({}, UINT64_MAX, UINT64_MAX, UINT64_MAX), LifetimeState::none);
}

TEST(Lifetime, EachSoftLimitIsReachedAtEquality) {
  EXPECT_EQ(check({.soft_bytes = 1000}, 999, 0, 0), LifetimeState::none);
  EXPECT_EQ(check({.soft_bytes = 1000}, 1000, 0, 0), LifetimeState::soft);
  EXPECT_EQ(check({.soft_packets = 10}, 0, 9, 0), LifetimeState::none);
  EXPECT_EQ(check({.soft_packets = 10}, 0, 10, 0), LifetimeState::soft);
  EXPECT_EQ(check({.soft_seconds = 60}, 0, 0, 59), LifetimeState::none);
  EXPECT_EQ(check({.soft_seconds = 60}, 0, 0, 61), LifetimeState::soft);
}

TEST(Lifetime, EachHardLimitIsReachedAtEquality) {
  EXPECT_EQ(check({.hard_bytes = 1000}, 1000, 0, 0), LifetimeState::hard);
  EXPECT_EQ(check({.hard_packets = 10}, 0, 10, 0), LifetimeState::hard);
  EXPECT_EQ(check({.hard_seconds = 60}, 0, 0, 60), LifetimeState::hard);
  EXPECT_EQ(check({.hard_seconds = 60}, 0, 0, 59), LifetimeState::none);
}

TEST(Lifetime, HardWinsOverSoft) {
  const Lifetimes limits{
      .soft_bytes = 100, .hard_bytes = 200, .soft_packets = 1, .hard_packets = 1000};
  EXPECT_EQ(check(limits, 150, 0, 0), LifetimeState::soft);
  EXPECT_EQ(check(limits, 200, 5, 0), LifetimeState::hard);
  // A hard limit on one measure beats a soft one on another.
  EXPECT_EQ(check(limits, 0, 1000, 0), LifetimeState::hard);
}

TEST(SequenceLifetime, AskForARekeyWellBeforeTheCounterRunsOutAndStopAtIt) {
  // Without ESN: soft with 2^28 numbers left, hard once 2^32 - 1 is used.
  EXPECT_EQ(check_sequence(1, false), LifetimeState::none);
  EXPECT_EQ(check_sequence(kSoftSequenceWithoutEsn - 1, false), LifetimeState::none);
  EXPECT_EQ(check_sequence(kSoftSequenceWithoutEsn, false), LifetimeState::soft);
  EXPECT_EQ(check_sequence(0xFFFFFFFEull, false), LifetimeState::soft);
  EXPECT_EQ(check_sequence(0xFFFFFFFFull, false), LifetimeState::hard);
  EXPECT_GE(0xFFFFFFFFull - kSoftSequenceWithoutEsn, uint64_t{1} << 28);
  // With ESN the same numbers are nowhere near the end.
  EXPECT_EQ(check_sequence(0xFFFFFFFFull, true), LifetimeState::none);
  EXPECT_EQ(check_sequence(kSoftSequenceWithEsn, true), LifetimeState::soft);
  EXPECT_EQ(check_sequence(~uint64_t{0}, true), LifetimeState::hard);
}
}  // namespace
}  // namespace espgw::xfrm
