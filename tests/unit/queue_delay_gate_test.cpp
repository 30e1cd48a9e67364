// CoDel on a receive queue's sojourn time (io/QueueDelayGate), driven with made-up clocks
// so that every decision can be checked: bursts shorter than an interval pass, a standing
// queue is met with drops that come faster the longer it stands (interval / sqrt(n)), the
// drops stop as soon as the delay is back under the target, and a queue that comes back
// soon resumes at the rate it had reached.
#include "io/queue_delay_gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace espgw::io {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kTarget = 500 * kUs;
constexpr uint64_t kInterval = 10 * kMs;

// Feeds one packet every `step` from `from` to `until`, each having waited `sojourn`;
// returns the times of the drops.
std::vector<uint64_t> feed(QueueDelayGate& gate, uint64_t from, uint64_t until, uint64_t step,
                           uint64_t sojourn) {
  std::vector<uint64_t> drops;
  for (uint64_t now = from; now < until; now += step)
    if (gate.should_drop(sojourn, now)) drops.push_back(now);
  return drops;
}

TEST(QueueDelayGate, NeverDropsBelowTheTarget) {
  QueueDelayGate gate(kTarget, kInterval);
  EXPECT_TRUE(feed(gate, kMs, 2000 * kMs, 10 * kUs, kTarget - 1).empty());
}

TEST(QueueDelayGate, ABurstShorterThanAnIntervalPasses) {
  QueueDelayGate gate(kTarget, kInterval);
  // 9 ms above the target, then below: no drop, and the next burst starts afresh.
  EXPECT_TRUE(feed(gate, kMs, 10 * kMs, 10 * kUs, 3 * kMs).empty());
  EXPECT_FALSE(gate.should_drop(100 * kUs, 10 * kMs));
  EXPECT_TRUE(feed(gate, 11 * kMs, 20 * kMs, 10 * kUs, 3 * kMs).empty());
}

TEST(QueueDelayGate, AStandingQueueGetsDropsAtTheControlLawsPace) {
  QueueDelayGate gate(kTarget, kInterval);
  const uint64_t start = 100 * kMs;
  const auto drops = feed(gate, start, start + 200 * kMs, 10 * kUs, 2 * kMs);
  ASSERT_GE(drops.size(), 10u);
  // The first drop once the delay has stood above the target for a whole interval.
  EXPECT_GE(drops[0], start + kInterval);
  EXPECT_LT(drops[0], start + kInterval + 20 * kUs);
  EXPECT_TRUE(gate.dropping());
  // Then the n-th gap is interval / sqrt(n) (to the 10 us the packets come at).
  for (size_t n = 1; n < drops.size(); ++n) {
    const double expected = static_cast<double>(kInterval) / std::sqrt(static_cast<double>(n));
    EXPECT_NEAR(static_cast<double>(drops[n] - drops[n - 1]), expected, 10.0 * kUs) << "gap " << n;
  }
}

TEST(QueueDelayGate, DropsStopWhenTheDelayFallsBelowTheTarget) {
  QueueDelayGate gate(kTarget, kInterval);
  ASSERT_FALSE(feed(gate, kMs, 50 * kMs, 10 * kUs, 2 * kMs).empty());
  EXPECT_FALSE(gate.should_drop(kTarget / 2, 50 * kMs));
  EXPECT_FALSE(gate.dropping());
  // One packet above the target again is a new interval, not a drop.
  EXPECT_FALSE(gate.should_drop(2 * kMs, 51 * kMs));
}

TEST(QueueDelayGate, AQueueThatReturnsSoonResumesAtTheRateItHadReached) {
  QueueDelayGate gate(kTarget, kInterval);
  const auto first = feed(gate, kMs, 300 * kMs, 10 * kUs, 2 * kMs);
  ASSERT_GE(first.size(), 20u);
  EXPECT_FALSE(gate.should_drop(0, 300 * kMs));
  // Back above the target 5 ms later: after an interval it drops again, and the gaps
  // are already short (the count carries over), not one interval long.
  const auto second = feed(gate, 305 * kMs, 400 * kMs, 10 * kUs, 2 * kMs);
  ASSERT_GE(second.size(), 3u);
  EXPECT_LT(second[1] - second[0], kInterval / 3);
}

TEST(QueueDelayGate, ATargetOfZeroTurnsItOff) {
  QueueDelayGate gate(0, kInterval);
  EXPECT_TRUE(feed(gate, kMs, 500 * kMs, 10 * kUs, 100 * kMs).empty());
}

}  // namespace
}  // namespace espgw::io
