// ECMP: flow identity, how evenly flows spread over a group, and how few move when the
// membership changes.
#include "pipeline/sa_group.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <span>
#include <thread>

#include "crypto/aead.h"
#include "packet/flow_key.h"
#include "pipeline/channels.h"
#include "pipeline/flow_hash.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::pipeline {
namespace {

constexpr uint64_t kSeed = 0x5eed;

std::vector<uint8_t> udp_flow(uint16_t source_port, uint16_t destination_port = 6000) {
  auto p = test::make_ipv4_packet(20);
  store_be16(&p[20], source_port);
  store_be16(&p[22], destination_port);
  return p;
}

// A packet's flow key, as the gateway extracts it before it picks an SA.
packet::FlowKey key_of(std::span<const uint8_t> bytes) {
  return packet::flow_key(bytes).value();
}

uint64_t hash_of(std::span<const uint8_t> bytes, uint64_t seed = kSeed) {
  return flow_hash(key_of(bytes), seed);
}

TEST(FlowHash, FiveTupleForTcpAndUdp) {
  EXPECT_NE(hash_of(udp_flow(1000)), hash_of(udp_flow(1001)));
  EXPECT_NE(hash_of(udp_flow(1000, 1)), hash_of(udp_flow(1000, 2)));
  // Payload and length do not matter, only the flow.
  auto a = udp_flow(1000);
  auto b = udp_flow(1000);
  b[40] ^= 0xFF;
  EXPECT_EQ(hash_of(a), hash_of(b));
  EXPECT_NE(hash_of(a), hash_of(a, kSeed + 1)) << "the seed changes the mapping";
}

TEST(FlowHash, FragmentsAndOtherProtocolsUseTheAddressPair) {
  auto first = udp_flow(1000);
  store_be16(&first[6], 0x2000);  // MF: first fragment, still carries ports
  auto later = udp_flow(5555);    // a later fragment's "ports" are payload bytes
  store_be16(&later[6], 0x00B9);  // fragment offset
  EXPECT_EQ(hash_of(first), hash_of(later));
  auto icmp_a = udp_flow(1);
  auto icmp_b = udp_flow(2);
  icmp_a[9] = icmp_b[9] = 1;  // ICMP: bytes after the header are not ports
  EXPECT_EQ(hash_of(icmp_a), hash_of(icmp_b));
}

TEST(FlowHash, PortsOfZeroDifferFromNoPorts) {
  // A fragment or a port-less protocol must not share its hash with the 5-tuple of the
  // same addresses and protocol whose ports happen to be zero.
  const auto zero_ports = udp_flow(0, 0);
  auto fragment = zero_ports;
  store_be16(&fragment[6], 0x00B9);
  EXPECT_NE(hash_of(zero_ports), hash_of(fragment));
  packet::FlowKey no_ports = key_of(zero_ports);
  no_ports.ports_known = false;
  EXPECT_NE(flow_hash(key_of(zero_ports), kSeed), flow_hash(no_ports, kSeed));
}

TEST(FlowHash, Ipv6FiveTupleAndFragmentHeader) {
  auto a = test::make_ipv6_packet(20);
  auto b = a;
  store_be16(&b[40], 1234);
  EXPECT_NE(hash_of(a), hash_of(b));
  EXPECT_NE(hash_of(a), hash_of(a, kSeed + 1)) << "the seed changes the mapping";
  // Turn both into later fragments (a fragment header, next header UDP, offset 8 bytes,
  // before what were the ports): the ports no longer count.
  for (auto* p : {&a, &b}) {
    p->insert(p->begin() + 40, {17, 0, 0, 8, 0, 0, 0, 1});
    (*p)[6] = 44;
    store_be16(&(*p)[4], static_cast<uint16_t>(p->size() - 40));
  }
  EXPECT_EQ(hash_of(a), hash_of(b));
}

std::map<uint64_t, uint64_t> assign(const SaGroup& group, int flows) {
  std::map<uint64_t, uint64_t> flow_to_member;
  for (int f = 0; f < flows; ++f)
    flow_to_member[f] = group.pick_key(
        hash_of(udp_flow(static_cast<uint16_t>(f), static_cast<uint16_t>(6000 + (f >> 16)))));
  return flow_to_member;
}

void add_members(SaGroup& group, int members) {
  for (int m = 1; m <= members; ++m) group.set_member(m, nullptr);
}

TEST(SaGroup, EmptyGroupPicksNothing) {
  SaGroup group;
  EXPECT_EQ(group.pick(123), nullptr);
  EXPECT_EQ(group.pick_key(123), 0u);
}

TEST(SaGroup, FlowsSpreadEvenly) {
  constexpr int kFlows = 100000;
  for (int members : {2, 4, 8, 16}) {
    SaGroup group;
    add_members(group, members);
    std::map<uint64_t, int> load;
    for (auto& [flow, member] : assign(group, kFlows)) ++load[member];
    ASSERT_EQ(static_cast<int>(load.size()), members);
    const double expected = double(kFlows) / members;
    double chi_square = 0;
    for (auto& [member, count] : load) {
      chi_square += (count - expected) * (count - expected) / expected;
      EXPECT_NEAR(count, expected, expected * 0.05) << members << " members";
    }
    // 99.9th percentile of chi-square with 15 degrees of freedom is 37.7.
    EXPECT_LT(chi_square, 40.0) << members << " members";
    std::printf("[ ecmp ] %2d members: chi-square %.1f over %d flows\n", members, chi_square,
                kFlows);
  }
}

TEST(SaGroup, RemovingAMemberMovesOnlyItsFlows) {
  constexpr int kFlows = 20000;
  SaGroup group;
  add_members(group, 4);
  auto before = assign(group, kFlows);
  ASSERT_TRUE(group.remove_member(3));
  auto after = assign(group, kFlows);
  int moved = 0;
  for (auto& [flow, member] : before) {
    if (member == 3) {
      EXPECT_NE(after[flow], 3u);
      ++moved;
    } else {
      EXPECT_EQ(after[flow], member) << "flow " << flow << " moved without cause";
    }
  }
  EXPECT_NEAR(moved, kFlows / 4, kFlows / 4 * 0.1);
}

TEST(SaGroup, AddingAMemberMovesOnlyFlowsToTheNewcomer) {
  constexpr int kFlows = 20000;
  SaGroup group;
  add_members(group, 4);
  auto before = assign(group, kFlows);
  group.set_member(5, nullptr);
  auto after = assign(group, kFlows);
  int moved = 0;
  for (auto& [flow, member] : before) {
    if (after[flow] != member) {
      EXPECT_EQ(after[flow], 5u);
      ++moved;
    }
  }
  EXPECT_NEAR(moved, kFlows / 5, kFlows / 5 * 0.1);
}

// What the group must answer: the member with the highest score mix64(flow ^ key hash),
// key hash = mix64(key ^ golden ratio), ties to the smaller key. Written out here so the
// large groups' table of choices is checked against the rule, not against itself.
uint64_t rendezvous_choice(const std::vector<uint64_t>& keys, uint64_t flow) {
  uint64_t best = 0, best_score = 0;
  for (const uint64_t key : keys) {
    const uint64_t score = mix64(flow ^ mix64(key ^ 0x9e3779b97f4a7c15ull));
    if (best == 0 || score > best_score || (score == best_score && key < best)) {
      best = key;
      best_score = score;
    }
  }
  return best;
}

// Members 1..n, and their keys as the rule above takes them.
std::vector<uint64_t> add_members_and_keys(SaGroup& group, int members) {
  add_members(group, members);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= static_cast<uint64_t>(members); ++k) keys.push_back(k);
  return keys;
}

std::vector<uint64_t> random_flows(size_t count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<uint64_t> flows(count);
  for (auto& flow : flows) flow = random();
  return flows;
}

// How many flows the group maps to another member than the rule does.
int wrong_picks(const SaGroup& group, const std::vector<uint64_t>& keys,
                const std::vector<uint64_t>& flows) {
  int wrong = 0;
  for (const uint64_t flow : flows) wrong += group.pick_key(flow) != rendezvous_choice(keys, flow);
  return wrong;
}

TEST(SaGroup, LargeGroupsRememberExactlyTheRendezvousChoice) {
  SaGroup group;
  std::vector<uint64_t> keys = add_members_and_keys(group, 64);
  std::vector<uint64_t> flows = random_flows(40000, 7);
  // Flows that share a bucket (the same bits 0-8) and replace each other there: 400
  // flows for its 8 ways, differing from one another only in the bits the entry itself
  // must tell apart (bit 9 up, the lowest ones included).
  for (uint64_t i = 1; i <= 400; ++i) flows.push_back(i << 9 | 0x123);
  auto check = [&](const char* when) { EXPECT_EQ(wrong_picks(group, keys, flows), 0) << when; };
  check("first picks (the table fills)");
  check("second picks (from the table)");
  ASSERT_TRUE(group.remove_member(17));
  std::erase(keys, 17u);
  check("after a member left (a new list, a new table)");
  group.set_member(99, nullptr);
  keys.push_back(99);
  check("after a member joined");
}

TEST(SaGroup, GroupsTooLargeForTheTableStillPickTheRendezvousChoice) {
  // Above 510 members a position no longer fits an entry: such a group scores every
  // packet, and must give the same answers.
  SaGroup group;
  const std::vector<uint64_t> keys = add_members_and_keys(group, 600);
  EXPECT_EQ(wrong_picks(group, keys, random_flows(2000, 11)), 0);
}

TEST(SaGroup, RekeyingAMemberMovesNoFlow) {
  constexpr int kFlows = 20000;
  SaGroup group;
  add_members(group, 4);
  auto before = assign(group, kFlows);
  group.set_member(2, nullptr);  // same member key, new SA
  EXPECT_EQ(assign(group, kFlows), before);
  EXPECT_EQ(group.size(), 4u);
}

class DiscardingSink final : public PacketSink {
 public:
  void deliver(std::span<Packet* const>) override {}
};

std::shared_ptr<OutboundChannel> test_channel(PacketSink& sink, uint32_t spi) {
  return std::make_shared<OutboundChannel>(
      std::make_shared<esp::OutboundSa>(
          test::make_sa_config(crypto::AeadAlgorithm::aes_gcm_128, false, false, false, spi),
          crypto::ipsec_mb_backend()),
      sink, 64);
}

// A gateway's reader picks from one group per tunnel. However many groups it uses, each
// group's next pick after a change hands over the view it replaced (the reader fences
// on it), and once groups are gone their views are let go, every one by a full sweep and
// all of them by bounded sweeps going round. A cache of 16 entries shared by address lost
// the views that other groups pushed out: after a rekey their flows moved unfenced.
TEST(SaGroup, AReaderOfManyGroupsSeesEachGroupsChangeAndLetsGoOfDeadOnes) {
  // A thread of its own: the views are per thread, and other tests leave theirs.
  std::thread([] {
    constexpr uint32_t kGroups = 300;
    DiscardingSink sink;
    std::vector<std::unique_ptr<SaGroup>> groups;
    std::vector<std::shared_ptr<OutboundChannel>> first;
    for (uint32_t g = 0; g < kGroups; ++g) {
      groups.push_back(std::make_unique<SaGroup>());
      first.push_back(test_channel(sink, 0x100 + g));
      groups.back()->set_member(1, first.back());
    }
    const auto flow = key_of(udp_flow(1000));
    for (uint32_t g = 0; g < kGroups; ++g) {
      SaGroup::Superseded superseded;
      EXPECT_EQ(groups[g]->pick_for_packet(flow, kSeed, &superseded), first[g].get());
      EXPECT_TRUE(superseded.channels.empty()) << "a first pick has nothing to hand over";
    }
    for (uint32_t g = 0; g < kGroups; ++g)
      groups[g]->set_member(1, test_channel(sink, 0x1000 + g));  // every member rekeyed
    uint32_t handed_over = 0;
    for (uint32_t g = 0; g < kGroups; ++g) {
      SaGroup::Superseded superseded;
      EXPECT_NE(groups[g]->pick_for_packet(flow, kSeed, &superseded), first[g].get());
      if (superseded.channels == std::vector<OutboundChannel*>{first[g].get()}) ++handed_over;
    }
    EXPECT_EQ(handed_over, kGroups) << "picks that handed over the view they replaced";

    // The views hold the current lists: nothing is retired yet.
    SaGroup::Superseded view;
    size_t looks = SaGroup::full_sweep_looks();
    EXPECT_GE(looks, size_t{2 * kGroups});
    EXPECT_FALSE(SaGroup::take_retired_view(view, looks));
    // A third of the groups go: a full sweep takes exactly their views.
    for (uint32_t g = 0; g < kGroups; g += 3) groups[g].reset();
    looks = SaGroup::full_sweep_looks();
    uint32_t taken = 0;
    while (SaGroup::take_retired_view(view, looks)) ++taken;
    EXPECT_EQ(taken, kGroups / 3);
    // Nothing retired since that round: the next sweep looks at no view.
    size_t idle_looks = 5;
    EXPECT_FALSE(SaGroup::take_retired_view(view, idle_looks));
    EXPECT_EQ(idle_looks, 5u);
    // Another third: sweeps of 16 looks each, enough for the rest of a round and a whole
    // one, take them all.
    for (uint32_t g = 1; g < kGroups; g += 3) groups[g].reset();
    taken = 0;
    for (size_t sweep = 0; sweep < SaGroup::full_sweep_looks() / 16; ++sweep) {
      looks = 16;
      while (SaGroup::take_retired_view(view, looks)) ++taken;
    }
    EXPECT_EQ(taken, kGroups / 3);
    // The last third is still picked from, as before the sweeps.
    for (uint32_t g = 2; g < kGroups; g += 3) {
      SaGroup::Superseded superseded;
      EXPECT_NE(groups[g]->pick_for_packet(flow, kSeed, &superseded), nullptr);
      EXPECT_TRUE(superseded.channels.empty());
    }
  }).join();
}

// Readers pick through their per-thread snapshot while a writer adds and removes a
// member: every pick is a member that existed, and once the writer is done (the removal
// published), no reader picks the removed member again.
void picks_follow_membership_changes(uint64_t members) {
  constexpr int kMinimumPicks = 50000;
  constexpr uint64_t kTransient = 100;
  SaGroup group;
  add_members(group, static_cast<int>(members));
  std::atomic<bool> settled{false};
  std::atomic<int> impossible{0}, stale{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 random(r);
      for (int i = 0;; ++i) {
        const bool was_settled = settled.load(std::memory_order_acquire);
        const uint64_t key = group.pick_key(random());
        if (key < 1 || (key > members && key != kTransient)) ++impossible;
        if (was_settled && key == kTransient) ++stale;
        if (was_settled && i >= kMinimumPicks) break;
      }
    });
  }
  for (int i = 0; i < 2000; ++i) {
    group.set_member(kTransient, nullptr);
    ASSERT_TRUE(group.remove_member(kTransient));
  }
  settled.store(true, std::memory_order_release);
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(impossible.load(), 0);
  EXPECT_EQ(stale.load(), 0) << "a reader kept a snapshot older than the last change";
}

TEST(SaGroupConcurrent, PicksFollowMembershipChanges) {
  picks_follow_membership_changes(4);
}

// The same with a group large enough for the table of choices, which every reader fills.
TEST(SaGroupConcurrent, PicksOfALargeGroupFollowMembershipChanges) {
  picks_follow_membership_changes(20);
}

}  // namespace
}  // namespace espgw::pipeline
