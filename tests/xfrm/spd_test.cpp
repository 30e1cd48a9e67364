// SPD lookups: priority first (lower wins), then selector specificity, then insertion
// order; per-direction lists; add/remove by id; readers alongside a writer.
#include "xfrm/spd.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "support/flow_packets.h"

namespace espgw::xfrm {
namespace {

using packet::flow_key;
using packet::FlowKey;

esp::IpPrefix prefix(std::string_view text) {
  return esp::IpPrefix::parse(text).value();
}

Policy policy(uint32_t id, std::string_view local, std::string_view remote, uint32_t priority = 0,
              PolicyAction action = PolicyAction::protect, Direction direction = Direction::out) {
  Policy p;
  p.id = id;
  p.direction = direction;
  p.selector.local = prefix(local);
  p.selector.remote = prefix(remote);
  p.priority = priority;
  p.action = action;
  p.reqid = action == PolicyAction::protect ? id : 0;
  return p;
}

const FlowKey kOutbound = flow_key(test::ipv4_packet({})).value();  // 10.1.0.1 -> 10.2.0.1

uint32_t winner(const Spd& spd, Direction direction = Direction::out,
                const FlowKey& key = kOutbound) {
  auto found = spd.lookup(direction, key);
  return found ? found->id : 0;
}

TEST(Spd, LowestPriorityValueWins) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16", 100)));
  ASSERT_TRUE(spd.add(policy(2, "0.0.0.0/0", "0.0.0.0/0", 50, PolicyAction::bypass)));
  ASSERT_TRUE(spd.add(policy(3, "10.1.0.1/32", "10.2.0.1/32", 200, PolicyAction::discard)));
  EXPECT_EQ(winner(spd), 2u);
  auto found = spd.lookup(Direction::out, kOutbound);
  EXPECT_EQ(found->action, PolicyAction::bypass);
}

TEST(Spd, FindsAPolicyByIdUntilItIsRemoved) {
  Spd spd;
  const Policy fwd =
      policy(7, "10.1.0.0/16", "10.2.0.0/16", 100, PolicyAction::protect, Direction::fwd);
  ASSERT_TRUE(spd.add(policy(1, "0.0.0.0/0", "0.0.0.0/0", 50, PolicyAction::bypass)));
  ASSERT_TRUE(spd.add(fwd));
  EXPECT_EQ(spd.find(7), fwd);
  EXPECT_EQ(spd.find(1)->action, PolicyAction::bypass);
  EXPECT_FALSE(spd.find(2));
  ASSERT_TRUE(spd.remove(7));
  EXPECT_FALSE(spd.find(7));
  EXPECT_TRUE(spd.find(1));
}

TEST(Spd, EqualPrioritiesPreferTheMoreSpecificSelector) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.0.0.0/8", "10.0.0.0/8")));
  ASSERT_TRUE(spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16")));
  ASSERT_TRUE(spd.add(policy(3, "10.1.0.0/16", "10.0.0.0/8")));
  EXPECT_EQ(winner(spd), 2u);
  // With equal prefixes, a fixed protocol is more specific.
  Policy udp_only = policy(4, "10.1.0.0/16", "10.2.0.0/16", 0, PolicyAction::discard);
  udp_only.selector.protocol = 17;
  ASSERT_TRUE(spd.add(udp_only));
  EXPECT_EQ(winner(spd), 4u);
}

TEST(Spd, EqualPriorityAndSpecificityKeepInsertionOrder) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(7, "10.1.0.0/16", "10.2.0.0/16", 5, PolicyAction::bypass)));
  ASSERT_TRUE(spd.add(policy(3, "10.1.0.0/16", "10.2.0.0/16", 5)));
  EXPECT_EQ(winner(spd), 7u);
  ASSERT_TRUE(spd.remove(7));
  EXPECT_EQ(winner(spd), 3u);
  // Re-adding puts it after the one that is now present.
  ASSERT_TRUE(spd.add(policy(7, "10.1.0.0/16", "10.2.0.0/16", 5, PolicyAction::bypass)));
  EXPECT_EQ(winner(spd), 3u);
}

TEST(Spd, PriorityOutranksSpecificity) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.1/32", "10.2.0.1/32", 10)));
  ASSERT_TRUE(spd.add(policy(2, "0.0.0.0/0", "0.0.0.0/0", 9, PolicyAction::discard)));
  EXPECT_EQ(winner(spd), 2u);
}

TEST(Spd, NonMatchingPoliciesAreSkipped) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.9.0.0/16", "10.2.0.0/16", 0)));
  EXPECT_FALSE(spd.lookup(Direction::out, kOutbound));
  ASSERT_TRUE(spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16", 1000)));
  EXPECT_EQ(winner(spd), 2u);
}

TEST(Spd, DirectionsAreSeparateAndInboundKeysAreReversed) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16", 0, PolicyAction::protect)));
  ASSERT_TRUE(
      spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16", 0, PolicyAction::protect, Direction::in)));
  ASSERT_TRUE(
      spd.add(policy(3, "10.1.0.0/16", "10.2.0.0/16", 0, PolicyAction::protect, Direction::fwd)));
  // A packet from the remote LAN, as it arrives: source 10.2.0.1.
  const FlowKey inbound = kOutbound.reversed();
  EXPECT_EQ(winner(spd, Direction::in, inbound), 2u);
  EXPECT_EQ(winner(spd, Direction::fwd, inbound), 3u);
  EXPECT_EQ(winner(spd, Direction::out, inbound), 0u);
  EXPECT_EQ(winner(spd, Direction::in, kOutbound), 0u);
}

TEST(Spd, InboundPortsAreMatchedFromTheLocalSide) {
  Spd spd;
  // Local SSH server: inbound packets go to local port 22.
  Policy ssh = policy(1, "10.1.0.0/16", "10.2.0.0/16", 0, PolicyAction::bypass, Direction::in);
  ssh.selector.protocol = 6;
  ssh.selector.local_ports = {22, 22};
  ASSERT_TRUE(spd.add(ssh));
  const FlowKey arriving = flow_key(test::ipv4_packet({.source = "10.2.0.9",
                                                       .destination = "10.1.0.1",
                                                       .protocol = 6,
                                                       .source_port = 40000,
                                                       .destination_port = 22}))
                               .value();
  EXPECT_EQ(winner(spd, Direction::in, arriving), 1u);
}

TEST(Spd, DuplicateIdsAreRefusedAcrossDirections) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16")));
  EXPECT_FALSE(spd.add(policy(1, "10.3.0.0/16", "10.4.0.0/16")));
  EXPECT_FALSE(
      spd.add(policy(1, "10.3.0.0/16", "10.4.0.0/16", 0, PolicyAction::protect, Direction::in)));
  EXPECT_EQ(spd.size(), 1u);
}

TEST(Spd, RemoveByIdAndList) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16", 10)));
  ASSERT_TRUE(
      spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16", 0, PolicyAction::bypass, Direction::in)));
  ASSERT_TRUE(spd.add(policy(3, "10.1.0.0/16", "10.2.0.0/16", 5)));
  // out first, by evaluation order; then in.
  std::vector<uint32_t> ids;
  for (const auto& p : spd.list()) ids.push_back(p.id);
  EXPECT_EQ(ids, (std::vector<uint32_t>{3, 1, 2}));
  EXPECT_TRUE(spd.remove(3));
  EXPECT_FALSE(spd.remove(3));
  EXPECT_FALSE(spd.remove(99));
  EXPECT_EQ(spd.size(), 2u);
  EXPECT_EQ(winner(spd), 1u);
}

TEST(Spd, InvalidDirectionIsRefused) {
  Spd spd;
  Policy bad = policy(1, "10.1.0.0/16", "10.2.0.0/16");
  bad.direction = static_cast<Direction>(7);
  EXPECT_FALSE(spd.add(bad));
  EXPECT_FALSE(spd.lookup(static_cast<Direction>(7), kOutbound));
}

// Each thread remembers recent answers: a change must void them, in this SPD only.
TEST(Spd, RememberedAnswersFollowEveryChange) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16", 10)));
  EXPECT_EQ(winner(spd), 1u);
  EXPECT_EQ(winner(spd), 1u);
  ASSERT_TRUE(spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16", 5, PolicyAction::discard)));
  EXPECT_EQ(winner(spd), 2u);
  ASSERT_TRUE(spd.remove(2));
  EXPECT_EQ(winner(spd), 1u);
  ASSERT_TRUE(spd.remove(1));
  EXPECT_EQ(winner(spd), 0u);
  EXPECT_EQ(winner(spd), 0u);  // "no policy" is remembered too, and voided by an add
  ASSERT_TRUE(spd.add(policy(3, "0.0.0.0/0", "0.0.0.0/0", 0, PolicyAction::bypass)));
  EXPECT_EQ(winner(spd), 3u);
  // Another SPD asked about the same flow gives its own answer.
  Spd other;
  ASSERT_TRUE(other.add(policy(4, "10.1.0.0/16", "10.2.0.0/16")));
  EXPECT_EQ(winner(other), 4u);
  EXPECT_EQ(winner(spd), 3u);
  // A failed add or remove changes nothing.
  EXPECT_FALSE(spd.add(policy(3, "10.1.0.1/32", "10.2.0.1/32")));
  EXPECT_FALSE(spd.remove(99));
  EXPECT_EQ(winner(spd), 3u);
}

// After each change, every reader's next lookup sees it, although each reader answered
// the same flow from its own cache just before the change.
TEST(SpdConcurrent, EveryReaderSeesEachChangeAtOnce) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16", 10)));
  constexpr int kReaders = 3;
  constexpr int kChanges = 400;
  // Phase k: policy 2 present for odd k. Readers check the phase's answer, twice (the
  // second from the cache), and acknowledge; the writer waits for all before changing.
  std::atomic<int> phase{0};
  std::atomic<int> acknowledged{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r)
    readers.emplace_back([&] {
      for (int seen = 0; seen < kChanges;) {
        const int now = phase.load(std::memory_order_acquire);
        if (now == seen) {
          std::this_thread::yield();
          continue;
        }
        const uint32_t expected = now % 2 ? 2 : 1;
        if (winner(spd) != expected || winner(spd) != expected) wrong.fetch_add(1);
        seen = now;
        acknowledged.fetch_add(1, std::memory_order_release);
      }
    });
  for (int k = 1; k <= kChanges; ++k) {
    if (k % 2)
      ASSERT_TRUE(spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16", 5)));
    else
      ASSERT_TRUE(spd.remove(2));
    phase.store(k, std::memory_order_release);
    while (acknowledged.load(std::memory_order_acquire) < k * kReaders) std::this_thread::yield();
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Readers keep finding a consistent winner while a writer adds and removes a policy that
// would win; the result is always one of the two, and the writer is never starved.
TEST(SpdConcurrent, LookupsRunBesideChanges) {
  Spd spd;
  ASSERT_TRUE(spd.add(policy(1, "10.1.0.0/16", "10.2.0.0/16", 10)));
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<uint64_t> lookups{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r)
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        const uint32_t id = winner(spd);
        if (id != 1 && id != 2) bad.fetch_add(1);
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
    });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int changes = 0;
  while (changes < 2000 ||
         (lookups.load() < 20000 && std::chrono::steady_clock::now() < deadline)) {
    ASSERT_TRUE(spd.add(policy(2, "10.1.0.0/16", "10.2.0.0/16", 5)));
    ASSERT_TRUE(spd.remove(2));
    ++changes;
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(lookups.load(), 0u);
  EXPECT_EQ(winner(spd), 1u);
}

}  // namespace
}  // namespace espgw::xfrm
