// OrderedRelease on its own: batches that continue the release point go straight to the
// sink; anything else (a gap, a batch staged while another thread delivers, packets left
// pending) goes through the reorder buffer, and every packet still leaves in index order.
#include "pipeline/ordered_release.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "pipeline/packet_pool.h"

namespace espgw::pipeline {
namespace {

constexpr uint64_t kHoldNs = 1'000'000'000;  // never expires during a test

// Records the index each delivered packet carries (in encap.sequence, which the release
// does not touch). `on_deliver` runs first, once per call, for tests that stage from
// inside a delivery.
class IndexSink final : public PacketSink {
 public:
  void deliver(std::span<Packet* const> packets) override {
    if (on_deliver) on_deliver();
    std::lock_guard guard(lock_);
    for (const Packet* packet : packets) indexes_.push_back(packet->encap.sequence);
  }
  std::vector<uint64_t> indexes() const {
    std::lock_guard guard(lock_);
    return indexes_;
  }
  std::function<void()> on_deliver;

 private:
  mutable std::mutex lock_;
  std::vector<uint64_t> indexes_;
};

Packet* tagged(PacketPool& pool, uint64_t index) {
  Packet* packet = pool.acquire();
  packet->encap.sequence = index;
  return packet;
}

std::vector<uint64_t> range(uint64_t first, uint64_t end) {
  std::vector<uint64_t> out;
  for (uint64_t i = first; i < end; ++i) out.push_back(i);
  return out;
}

TEST(OrderedRelease, InOrderBatchesGoStraightToTheSinkAndMoveTheReleasePoint) {
  PacketPool pool(64, 64);
  IndexSink sink;
  OrderedRelease release(16, kHoldNs, 1);
  // 1-4 with 3 a tombstone (a number used by a packet that was dropped), then 5-8.
  std::vector<OrderedRelease::Staged> first = {
      {1, tagged(pool, 1)}, {2, tagged(pool, 2)}, {3, nullptr}, {4, tagged(pool, 4)}};
  EXPECT_FALSE(release.stage_and_drain(first, 0, sink, pool));
  std::vector<OrderedRelease::Staged> second;
  for (uint64_t i = 5; i <= 8; ++i) second.push_back({i, tagged(pool, i)});
  EXPECT_FALSE(release.stage_and_drain(second, 0, sink, pool));
  // Only tombstones: nothing to deliver, and the release point still moves past them.
  std::vector<OrderedRelease::Staged> dropped = {{9, nullptr}, {10, nullptr}};
  EXPECT_FALSE(release.stage_and_drain(dropped, 0, sink, pool));
  EXPECT_TRUE(release.insert(12, tagged(pool, 12), sink, pool));  // 11 is missing
  EXPECT_FALSE(release.insert(11, tagged(pool, 11), sink, pool));

  EXPECT_EQ(sink.indexes(), (std::vector<uint64_t>{1, 2, 4, 5, 6, 7, 8, 11, 12}));
  EXPECT_EQ(release.stats().released, 9u);  // packets, not tombstones
  EXPECT_EQ(release.delivered(), 9u);
  EXPECT_EQ(release.held(), 0u);
  EXPECT_EQ(pool.count_free(), pool.size());  // every delivered packet went back
}

TEST(OrderedRelease, ABatchAfterAGapWaitsForIt) {
  PacketPool pool(64, 64);
  IndexSink sink;
  OrderedRelease release(16, kHoldNs, 0);
  std::vector<OrderedRelease::Staged> later = {{2, tagged(pool, 2)}, {3, tagged(pool, 3)}};
  EXPECT_TRUE(release.stage_and_drain(later, 0, sink, pool));
  EXPECT_TRUE(sink.indexes().empty());
  std::vector<OrderedRelease::Staged> gap = {{0, tagged(pool, 0)}, {1, tagged(pool, 1)}};
  EXPECT_FALSE(release.stage_and_drain(gap, 0, sink, pool));
  EXPECT_EQ(sink.indexes(), range(0, 4));
  // A batch that repeats an index already released is not taken as the next in order.
  std::vector<OrderedRelease::Staged> overlap = {{3, tagged(pool, 3)}, {4, tagged(pool, 4)}};
  release.stage_and_drain(overlap, 0, sink, pool);
  EXPECT_EQ(release.stats().late, 1u);
  EXPECT_EQ(sink.indexes().back(), 4u);
}

TEST(OrderedRelease, TombstonesAloneBehindAGapNeedNoTimerAndAPacketStartsTheHold) {
  PacketPool pool(64, 64);
  IndexSink sink;
  OrderedRelease release(16, kHoldNs, 0);
  // 0 is still in crypto or lost; 1 was dropped after authentication. Nothing waits, so
  // the caller need not come back (a timer would otherwise poll an idle SA for good).
  EXPECT_FALSE(release.insert(1, nullptr, sink, pool));
  EXPECT_EQ(release.held(), 1u);
  // A packet behind the gap waits, and asks for the timer.
  EXPECT_TRUE(release.insert(2, tagged(pool, 2), sink, pool));
  EXPECT_TRUE(sink.indexes().empty());
  EXPECT_FALSE(release.insert(0, tagged(pool, 0), sink, pool));
  EXPECT_EQ(sink.indexes(), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(release.held(), 0u);
  EXPECT_EQ(release.stats().skipped, 0u);
}

// Packets in crypto make a gap wait kBusyHoldFactor times its hold (the missing packet
// may be among them), but not once packets of the channel failed authentication: a flood
// of forged packets on an SA's SPI keeps its workers busy for as long as it lasts, and
// must not stretch every gap of the genuine traffic eightfold.
TEST(OrderedRelease, ForgedPacketsInCryptoDoNotStretchTheHold) {
  constexpr uint64_t kShortHoldNs = 20'000'000;  // busy: 160 ms
  const auto gap_given_up_after_twice_the_hold = [](bool forged) {
    PacketPool pool(64, 64);
    IndexSink sink;
    std::atomic<uint64_t> in_crypto{8};  // the workers hold this channel's packets
    OrderedRelease release(16, kShortHoldNs, 0, &in_crypto);
    // Two packets came back from crypto: one genuine (index 1; 0 is missing) and, when
    // `forged`, one that failed its ICV check (no index: its number proves nothing).
    std::vector<OrderedRelease::Staged> batch = {{1, tagged(pool, 1)}};
    release.stage_and_drain(batch, 2, sink, pool, forged ? 1 : 0);
    std::this_thread::sleep_for(std::chrono::nanoseconds(2 * kShortHoldNs));
    release.drain(sink, pool);
    return sink.indexes() == std::vector<uint64_t>{1};
  };
  EXPECT_FALSE(gap_given_up_after_twice_the_hold(false));  // the busy hold
  EXPECT_TRUE(gap_given_up_after_twice_the_hold(true));
}

TEST(OrderedRelease, ABatchStagedWhileThisThreadDeliversLeavesAfterWhatIsBeingDelivered) {
  PacketPool pool(64, 64);
  IndexSink sink;
  OrderedRelease release(16, kHoldNs, 0);
  bool nested_reported_held = true;
  int calls = 0;
  // The sink stages the next batch in order during the first delivery (as a loopback or
  // forwarder that submits can): the delivery is still this thread's, so that batch must
  // not be delivered inside it, ahead of the rest of what is being delivered.
  sink.on_deliver = [&] {
    if (calls++ != 0) return;
    std::vector<OrderedRelease::Staged> next = {{2, tagged(pool, 2)}, {3, tagged(pool, 3)}};
    nested_reported_held = release.stage_and_drain(next, 0, sink, pool);
  };
  std::vector<OrderedRelease::Staged> first = {{0, tagged(pool, 0)}, {1, tagged(pool, 1)}};
  EXPECT_FALSE(release.stage_and_drain(first, 0, sink, pool));
  EXPECT_FALSE(nested_reported_held);
  EXPECT_EQ(calls, 2);  // the outer delivery came back for the nested batch
  EXPECT_EQ(sink.indexes(), range(0, 4));
}

// The way a batch spanning many channels reaches a shared sink: the in-order batch is
// handed to the caller instead of the sink, and until the caller finishes its delivery,
// the channel is still being delivered, so what another thread stages meanwhile waits and
// leaves after it, through the channel's own sink.
TEST(OrderedRelease, ABatchTakenForASharedSinkHoldsTheDeliveryUntilItIsFinished) {
  PacketPool pool(64, 64);
  IndexSink sink;
  OrderedRelease release(16, kHoldNs, 0);
  std::array<Packet*, OrderedRelease::kInOrderMax> out{};
  std::vector<OrderedRelease::Staged> first = {{0, tagged(pool, 0)}, {1, tagged(pool, 1)}};
  bool held = true;
  ASSERT_EQ(release.stage_or_take(first, 0, out, sink, pool, held), 2u);
  EXPECT_FALSE(held);
  EXPECT_EQ(out[0]->encap.sequence, 0u);
  EXPECT_EQ(out[1]->encap.sequence, 1u);
  EXPECT_TRUE(release.delivering());

  // Staged meanwhile (another worker), in order but behind the taken batch: held back.
  std::vector<OrderedRelease::Staged> next = {{2, tagged(pool, 2)}, {3, tagged(pool, 3)}};
  EXPECT_FALSE(release.stage_and_drain(next, 0, sink, pool));
  EXPECT_TRUE(sink.indexes().empty());
  // And a batch after a gap is not taken: it goes the ordinary way (held in the buffer).
  std::vector<OrderedRelease::Staged> after_gap = {{5, tagged(pool, 5)}};
  std::array<Packet*, OrderedRelease::kInOrderMax> unused{};
  EXPECT_EQ(release.stage_or_take(after_gap, 0, unused, sink, pool, held), 0u);
  EXPECT_TRUE(held);  // 5 waits behind the gap at 4

  // The shared sink sent 0 and 1 and the caller returned them to the pool; finishing
  // delivers 2 and 3 through the channel's sink.
  pool.release(std::span<Packet* const>(out.data(), 2));
  EXPECT_TRUE(release.finish_delivery(2, sink, pool));  // 5 waits for 4
  EXPECT_EQ(sink.indexes(), range(2, 4));
  EXPECT_FALSE(release.delivering());
  EXPECT_EQ(release.delivered(), 4u);
  EXPECT_FALSE(release.insert(4, tagged(pool, 4), sink, pool));
  EXPECT_EQ(sink.indexes(), range(2, 6));
  EXPECT_EQ(pool.count_free(), pool.size());
}

// Workers that each take a block of consecutive indexes (as a reader takes sequence
// numbers for its batch), stage it after a random delay, in any order across threads:
// batches that continue the release point take the direct way, the others wait in the
// buffer, and the sink must still see every index once, in order.
TEST(OrderedReleaseConcurrent, BlocksStagedByManyThreadsLeaveInOrderExactlyOnce) {
  constexpr unsigned kThreads = 4;
  constexpr uint64_t kIndexes = 20000;
  PacketPool pool(4096, 64);
  IndexSink sink;
  // Further than the pool reaches (packets and the tombstones between them): no overflow.
  OrderedRelease release(8192, kHoldNs, 0);
  std::atomic<uint64_t> next{0};
  auto is_tombstone = [](uint64_t i) { return i % 97 == 0; };  // dropped after its number
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 random(t);
      std::vector<Packet*> packets;
      for (;;) {
        const uint64_t size = 1 + random() % OrderedRelease::kInOrderMax;
        // Packets first, numbers after: a thread holding numbers never waits for the pool,
        // which the packets held behind its gap may have drained.
        while (packets.size() < size) {
          if (Packet* packet = pool.acquire())
            packets.push_back(packet);
          else
            std::this_thread::yield();  // the others free packets as they deliver
        }
        const uint64_t first = next.fetch_add(size);
        std::vector<OrderedRelease::Staged> batch;
        for (uint64_t i = first; i < std::min(first + size, kIndexes); ++i) {
          Packet* packet = nullptr;
          if (!is_tombstone(i)) {
            packet = packets.back();
            packets.pop_back();
            packet->encap.sequence = i;
          }
          batch.push_back({i, packet});
        }
        if (random() % 4 == 0)
          std::this_thread::sleep_for(std::chrono::microseconds(random() % 50));
        if (!batch.empty()) release.stage_and_drain(batch, 0, sink, pool);
        if (first + size >= kIndexes) break;
      }
      for (Packet* packet : packets) pool.release(packet);
    });
  for (auto& thread : threads) thread.join();
  std::vector<uint64_t> expected;
  for (uint64_t i = 0; i < kIndexes; ++i)
    if (!is_tombstone(i)) expected.push_back(i);
  // Every gap was filled by the thread that held its numbers, whose delivery took what
  // waited behind it: nothing is left held, nothing came late.
  EXPECT_EQ(sink.indexes(), expected);
  EXPECT_EQ(release.held(), 0u);
  EXPECT_EQ(release.stats().late, 0u);
  EXPECT_EQ(release.stats().hold_timeouts, 0u);
  EXPECT_EQ(release.stats().released, expected.size());
  EXPECT_EQ(pool.count_free(), pool.size());
}

}  // namespace
}  // namespace espgw::pipeline
