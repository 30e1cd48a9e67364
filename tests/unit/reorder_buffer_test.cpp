// ReorderBuffer on its own: in-order release, gap hold and timeout, overflow, tombstones,
// late packets, and a property test against a reference model.
#include "pipeline/reorder_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "pipeline/packet.h"

namespace espgw::pipeline {
namespace {

// Fake packets: only their identity matters to the buffer.
struct Packets {
  std::vector<std::unique_ptr<Packet>> storage;
  std::map<const Packet*, uint64_t> index_of;
  Packet* make(uint64_t index) {
    storage.push_back(std::make_unique<Packet>(16));
    index_of[storage.back().get()] = index;
    return storage.back().get();
  }
  std::vector<uint64_t> indexes(const std::vector<Packet*>& released) {
    std::vector<uint64_t> out;
    for (auto* p : released) out.push_back(index_of.at(p));
    return out;
  }
};

constexpr uint64_t kHold = 1000;

TEST(ReorderBuffer, ReleasesInOrderImmediately) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  for (uint64_t i = 1; i <= 20; ++i) buffer.insert(i, packets.make(i), 0, out);
  EXPECT_EQ(packets.indexes(out).size(), 20u);
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end(), [&](auto* a, auto* b) {
    return packets.index_of[a] < packets.index_of[b];
  }));
  EXPECT_EQ(buffer.held(), 0u);
}

TEST(ReorderBuffer, HoldsBehindAGapUntilItFills) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  buffer.insert(2, packets.make(2), 0, out);
  buffer.insert(3, packets.make(3), 0, out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(buffer.release(kHold - 1, out));
  EXPECT_TRUE(out.empty());
  buffer.insert(1, packets.make(1), 10, out);
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(buffer.stats().skipped, 0u);
}

TEST(ReorderBuffer, SkipsAGapAfterTheHoldTime) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  buffer.insert(3, packets.make(3), 100, out);
  buffer.insert(5, packets.make(5), 200, out);
  // Just before the hold time nothing is released, and both packets stay held.
  EXPECT_TRUE(buffer.release(100 + kHold - 1, out));
  EXPECT_TRUE(out.empty());
  // At 100 + hold the first gap expires; the second (4) has waited only from 200.
  EXPECT_TRUE(buffer.release(100 + kHold, out));
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{3}));
  EXPECT_FALSE(buffer.release(200 + kHold, out));
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(buffer.stats().skipped, 3u);  // 1, 2 and 4
  EXPECT_EQ(buffer.stats().hold_timeouts, 2u);
  // The lost packet 2 shows up after all: released at once, as late.
  buffer.insert(2, packets.make(2), 5000, out);
  EXPECT_EQ(packets.indexes(out).back(), 2u);
  EXPECT_EQ(buffer.stats().late, 1u);
}

TEST(ReorderBuffer, TombstonesFillGapsWithoutReleasingAnything) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  buffer.insert(2, packets.make(2), 0, out);
  buffer.insert(1, nullptr, 0, out);
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{2}));
  EXPECT_EQ(buffer.stats().skipped, 0u);
}

TEST(ReorderBuffer, ATombstoneBehindAGapDoesNotCutTheHoldShort) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  const uint64_t t = 1'000'000;       // a clock well past zero, as CLOCK_MONOTONIC is
  buffer.insert(2, nullptr, t, out);  // 1 is still in crypto; 2 was dropped after its number
  buffer.insert(3, packets.make(3), t, out);
  // The hold runs from packet 3's arrival, not from "long ago" for the tombstone.
  EXPECT_TRUE(buffer.release(t + kHold - 1, out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(buffer.stats().hold_timeouts, 0u);
  EXPECT_FALSE(buffer.release(t + kHold, out));
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{3}));
  EXPECT_EQ(buffer.stats().skipped, 1u);
}

TEST(ReorderBuffer, OnlyTombstonesBehindAGapWaitForIt) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  buffer.insert(2, nullptr, 0, out);
  // Nothing waits, so nothing is given up, however long it takes, and there is nothing
  // to come back for (no timer kept busy by an idle SA).
  EXPECT_FALSE(buffer.release(uint64_t{1} << 60, out));
  EXPECT_FALSE(buffer.packets_waiting());
  EXPECT_EQ(buffer.held(), 1u);
  EXPECT_EQ(buffer.stats().hold_timeouts, 0u);
  buffer.insert(1, packets.make(1), uint64_t{1} << 60, out);
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{1}));
  EXPECT_EQ(buffer.stats().late, 0u);
  EXPECT_EQ(buffer.next_index(), 3u);
}

TEST(ReorderBuffer, APacketTooFarAheadForcesTheWindowForward) {
  Packets packets;
  ReorderBuffer buffer(8, kHold, 1);
  std::vector<Packet*> out;
  buffer.insert(3, packets.make(3), 0, out);
  buffer.insert(20, packets.make(20), 0, out);  // capacity 8: 13..20 may be held
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{3}));
  EXPECT_EQ(buffer.next_index(), 13u);
  EXPECT_EQ(buffer.stats().overflows, 1u);
  EXPECT_EQ(buffer.held(), 1u);
}

TEST(ReorderBuffer, ZeroHoldNeverGivesUp) {
  Packets packets;
  ReorderBuffer buffer(8, 0, 0);
  std::vector<Packet*> out;
  buffer.insert(1, packets.make(1), 0, out);
  EXPECT_TRUE(buffer.release(~uint64_t{0} / 2, out));
  EXPECT_TRUE(out.empty());
}

TEST(ReorderBuffer, FlushReleasesEverythingInOrder) {
  Packets packets;
  ReorderBuffer buffer(16, kHold, 1);
  std::vector<Packet*> out;
  for (uint64_t i : {9, 4, 7, 2}) buffer.insert(i, packets.make(i), 0, out);
  buffer.flush(out);
  EXPECT_EQ(packets.indexes(out), (std::vector<uint64_t>{2, 4, 7, 9}));
  EXPECT_EQ(buffer.held(), 0u);
}

// Property: with no timeouts, any arrival order within the capacity releases every index
// exactly once, in order.
TEST(ReorderBuffer, InOrderTrafficNeedsNoRing) {
  // Thousands of SAs are cheap because an idle or in-order SA allocates no slots.
  Packets packets;
  ReorderBuffer buffer(4096, kHold, 1);
  std::vector<Packet*> out;
  EXPECT_EQ(buffer.ring_size(), 0u);
  for (uint64_t i = 1; i <= 100; ++i) buffer.insert(i, packets.make(i), 0, out);
  EXPECT_EQ(out.size(), 100u);
  EXPECT_EQ(buffer.ring_size(), 0u);
  EXPECT_EQ(buffer.capacity(), 4096u);
}

TEST(ReorderBuffer, RingGrowsAsFarAsPacketsArriveAheadAndKeepsWhatItHolds) {
  Packets packets;
  ReorderBuffer buffer(1024, kHold, 1);
  std::vector<Packet*> out;
  buffer.insert(3, packets.make(3), 0, out);
  EXPECT_EQ(buffer.ring_size(), 16u);  // the first wait allocates a small ring
  // Arrivals further and further ahead grow it, each time moving what is held.
  for (uint64_t i = 600; i >= 4; --i) buffer.insert(i, packets.make(i), 0, out);
  EXPECT_EQ(buffer.ring_size(), 1024u);
  EXPECT_TRUE(out.empty());
  buffer.insert(2, packets.make(2), 0, out);
  buffer.insert(1, packets.make(1), 0, out);
  std::vector<uint64_t> expected(600);
  for (uint64_t i = 0; i < 600; ++i) expected[i] = i + 1;
  EXPECT_EQ(packets.indexes(out), expected);
  EXPECT_EQ(buffer.held(), 0u);
  EXPECT_EQ(buffer.stats().skipped, 0u);
  EXPECT_EQ(buffer.stats().overflows, 0u);
}

TEST(ReorderBufferProperty, AnyPermutationWithinCapacityComesOutSorted) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const size_t capacity = size_t{1} << (2 + rng() % 6);
    Packets packets;
    ReorderBuffer buffer(capacity, 0, 1);
    std::vector<uint64_t> order(2000);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i + 1;
    // Shuffle inside consecutive blocks no larger than the capacity.
    for (size_t start = 0; start < order.size(); start += capacity) {
      const size_t end = std::min(order.size(), start + capacity);
      std::shuffle(order.begin() + start, order.begin() + end, rng);
    }
    std::vector<Packet*> out;
    for (uint64_t index : order) buffer.insert(index, packets.make(index), 0, out);
    auto released = packets.indexes(out);
    ASSERT_EQ(released.size(), order.size());
    for (size_t i = 0; i < released.size(); ++i) ASSERT_EQ(released[i], i + 1);
  }
}

}  // namespace
}  // namespace espgw::pipeline
