// CoDel on a receive queue's sojourn time (io/QueueDelayGate), driven with made-up clocks
// so that every decision can be checked: bursts shorter than an interval pass, a standing
// queue is met with drops that come faster the longer it stands (interval / sqrt(n)), the
// drops stop as soon as the delay is back under the target, and a queue that comes back
// soon resumes at the rate it had reached. A queue that stood empty for an interval held
// no delay: the next packet starts afresh, however late.
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
    if (gate.should_drop(sojourn, now, false)) drops.push_back(now);
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
  EXPECT_FALSE(gate.should_drop(100 * kUs, 10 * kMs, false));
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
  EXPECT_FALSE(gate.should_drop(kTarget / 2, 50 * kMs, false));
  EXPECT_FALSE(gate.dropping());
  // One packet above the target again is a new interval, not a drop.
  EXPECT_FALSE(gate.should_drop(2 * kMs, 51 * kMs, false));
}

TEST(QueueDelayGate, AQueueThatReturnsSoonResumesAtTheRateItHadReached) {
  QueueDelayGate gate(kTarget, kInterval);
  const auto first = feed(gate, kMs, 300 * kMs, 10 * kUs, 2 * kMs);
  ASSERT_GE(first.size(), 20u);
  EXPECT_FALSE(gate.should_drop(0, 300 * kMs, false));
  // Back above the target 5 ms later: after an interval it drops again, and the gaps
  // are already short (the count carries over), not one interval long.
  const auto second = feed(gate, 305 * kMs, 400 * kMs, 10 * kUs, 2 * kMs);
  ASSERT_GE(second.size(), 3u);
  EXPECT_LT(second[1] - second[0], kInterval / 3);
}

// What two CI runs lost a ping to: a reader the host held back delays a lone packet past
// the target, and the next lone packet, 50 ms later, is late again. Each left the queue
// empty, which then stayed empty for far longer than an interval: nothing stood in it,
// and neither may be dropped.
TEST(QueueDelayGate, LonePacketsLateByAHeldBackReaderAreNeverDropped) {
  QueueDelayGate gate(kTarget, kInterval);
  for (uint64_t now = 100 * kMs; now < 5000 * kMs; now += 50 * kMs)
    EXPECT_FALSE(gate.should_drop(3 * kMs, now, true)) << "at " << now / kMs << " ms";
  EXPECT_FALSE(gate.dropping());
}

// The same lone packets from a queue that was never seen empty (the reads were full) are
// a delay that stood: the second is dropped.
TEST(QueueDelayGate, LatePacketsFromAQueueNotSeenEmptyAreADelayThatStood) {
  QueueDelayGate gate(kTarget, kInterval);
  EXPECT_FALSE(gate.should_drop(3 * kMs, 100 * kMs, false));
  EXPECT_TRUE(gate.should_drop(3 * kMs, 150 * kMs, false));
}

// Under load a reader running to completion empties the socket with most reads, and it
// fills again within microseconds: that is still a standing queue, and the control law
// keeps its pace.
TEST(QueueDelayGate, AQueueEmptiedByEveryReadButRefilledAtOnceStillGetsDrops) {
  QueueDelayGate gate(kTarget, kInterval);
  const uint64_t start = 100 * kMs;
  std::vector<uint64_t> drops;
  uint64_t packet = 0;
  for (uint64_t now = start; now < start + 200 * kMs; now += 10 * kUs, ++packet)
    if (gate.should_drop(2 * kMs, now, packet % 8 == 7)) drops.push_back(now);  // reads of 8
  ASSERT_GE(drops.size(), 10u);
  EXPECT_LT(drops[0], start + kInterval + 20 * kUs);
}

TEST(QueueDelayGate, AQueueEmptyForAnIntervalEndsTheDroppingState) {
  QueueDelayGate gate(kTarget, kInterval);
  ASSERT_FALSE(feed(gate, kMs, 50 * kMs, 10 * kUs, 2 * kMs).empty());
  ASSERT_TRUE(gate.dropping());
  // The last packet of the standing queue left it empty; the next comes an interval
  // later, late again (the reader was held back): not a drop, and no longer dropping.
  gate.should_drop(2 * kMs, 50 * kMs, true);
  EXPECT_FALSE(gate.should_drop(2 * kMs, 50 * kMs + kInterval, false));
  EXPECT_FALSE(gate.dropping());
  // A queue that stands from then on gets a whole interval before its first drop.
  const auto again = feed(gate, 50 * kMs + kInterval + 10 * kUs, 200 * kMs, 10 * kUs, 2 * kMs);
  ASSERT_FALSE(again.empty());
  EXPECT_GE(again[0], 50 * kMs + 2 * kInterval);
}

TEST(QueueDelayGate, ATargetOfZeroTurnsItOff) {
  QueueDelayGate gate(0, kInterval);
  EXPECT_TRUE(feed(gate, kMs, 500 * kMs, 10 * kUs, 100 * kMs).empty());
}

}  // namespace
}  // namespace espgw::io
