// xfrm::Spd's index against the plain ordered list it replaced (tests/support/linear_spd.h):
// thousands of random policies with overlapping prefixes of both families, fixed and any
// protocols, single ports and ranges, tied priorities and specificities, added and
// removed in random order, and random flows (fragments included) looked up in every
// direction. Every answer must be the same policy.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "support/linear_spd.h"
#include "xfrm/spd.h"

namespace espgw::xfrm {
namespace {

using packet::FlowKey;

class RandomSpd {
 public:
  explicit RandomSpd(uint32_t seed) : random_(seed) {}

  size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(random_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(random_); }

  // Few distinct addresses, so that prefixes nest and overlap often.
  esp::IpAddress address(uint8_t family) {
    esp::IpAddress a;
    a.family = family;
    if (family == 4) {
      a.bytes[0] = 10;
      a.bytes[1] = static_cast<uint8_t>(below(3));
      a.bytes[2] = static_cast<uint8_t>(below(4));
      a.bytes[3] = static_cast<uint8_t>(below(6) * 37);
    } else {
      a.bytes[0] = 0xfd;
      a.bytes[1] = static_cast<uint8_t>(below(3));
      a.bytes[7] = static_cast<uint8_t>(below(4));
      a.bytes[15] = static_cast<uint8_t>(below(6) * 37);
    }
    return a;
  }

  esp::IpPrefix prefix(uint8_t family) {
    static constexpr uint8_t kV4[] = {0, 8, 15, 16, 24, 30, 32};
    static constexpr uint8_t kV6[] = {0, 8, 16, 56, 64, 120, 128};
    esp::IpPrefix p;
    p.address = address(family);  // host bits left set: the selector ignores them
    if (chance(0.2))
      p.length = static_cast<uint8_t>(below(family == 4 ? 33 : 129));
    else
      p.length = family == 4 ? kV4[below(std::size(kV4))] : kV6[below(std::size(kV6))];
    return p;
  }

  uint16_t port() {
    static constexpr uint16_t kPorts[] = {0, 22, 80, 443, 1000, 2000, 65535};
    return chance(0.8) ? kPorts[below(std::size(kPorts))] : static_cast<uint16_t>(below(65536));
  }

  PortRange ports() {
    const size_t kind = below(10);
    if (kind < 5) return {};
    if (kind < 8) {
      const uint16_t p = port();
      return {p, p};
    }
    uint16_t a = port(), b = port();
    if (a > b) std::swap(a, b);
    return {a, b};
  }

  uint8_t protocol() {
    static constexpr uint8_t kProtocols[] = {0, 0, 0, 6, 17, 1};
    return kProtocols[below(std::size(kProtocols))];
  }

  Policy policy(uint32_t id) {
    Policy p;
    p.id = id;
    p.direction = static_cast<Direction>(below(3));
    const uint8_t family = chance(0.6) ? 4 : 6;
    p.selector.local = prefix(family);
    // Now and then a selector of mixed families, which can never match.
    p.selector.remote = prefix(chance(0.02) ? 10 - family : family);
    p.selector.protocol = protocol();
    p.selector.local_ports = ports();
    p.selector.remote_ports = ports();
    static constexpr uint32_t kPriorities[] = {0, 0, 1, 5, 100, 1000};
    p.priority = kPriorities[below(std::size(kPriorities))];
    p.action = static_cast<PolicyAction>(below(3));
    p.reqid = p.action == PolicyAction::protect ? static_cast<uint32_t>(1 + below(50)) : 0;
    return p;
  }

  FlowKey flow() {
    FlowKey k;
    const uint8_t family = chance(0.6) ? 4 : 6;
    k.source = address(family);
    k.destination = address(family);
    static constexpr uint8_t kProtocols[] = {6, 17, 1, 50, 132};
    k.protocol = kProtocols[below(std::size(kProtocols))];
    // Fragments and protocols without ports carry none.
    k.ports_known = k.protocol != 1 && k.protocol != 50 && chance(0.85);
    if (k.ports_known) {
      k.source_port = port();
      k.destination_port = port();
    }
    return k;
  }

 private:
  std::mt19937 random_;
};

std::string describe(const std::optional<Policy>& p) {
  return p ? "policy " + std::to_string(p->id) : "no policy";
}

void expect_same_lookups(const Spd& spd, const test::LinearSpd& reference, RandomSpd& random,
                         int flows) {
  for (int i = 0; i < flows; ++i) {
    const FlowKey key = random.flow();
    for (Direction direction : {Direction::out, Direction::in, Direction::fwd}) {
      const auto expected = reference.lookup(direction, key);
      // Twice: the second answer comes from the thread's flow cache.
      for (int pass = 0; pass < 2; ++pass) {
        const auto found = spd.lookup(direction, key);
        ASSERT_EQ(found, expected)
            << "flow " << key.source.to_string() << " -> " << key.destination.to_string()
            << " proto " << int{key.protocol} << " ports "
            << (key.ports_known
                    ? std::to_string(key.source_port) + "/" + std::to_string(key.destination_port)
                    : "opaque")
            << " direction " << direction_name(direction) << ": " << describe(found)
            << ", expected " << describe(expected);
      }
    }
  }
}

TEST(SpdDifferential, RandomPoliciesAndFlowsGiveTheLinearAnswer) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomSpd random(seed);
    Spd spd;
    test::LinearSpd reference;
    std::vector<uint32_t> present;
    uint32_t next_id = 1;
    // Grow to 3,000 policies in steps, checking lookups at each size.
    for (int round = 0; round < 6; ++round) {
      for (int i = 0; i < 500; ++i) {
        const Policy p = random.policy(next_id++);
        ASSERT_EQ(spd.add(p), reference.add(p));
        present.push_back(p.id);
      }
      expect_same_lookups(spd, reference, random, 300);
      if (HasFatalFailure()) return;
      ASSERT_EQ(spd.list(), reference.list());
      ASSERT_EQ(spd.size(), present.size());
    }
    // Then churn: removals (some of ids that are gone), re-adds of the same ids with new
    // selectors, duplicate ids.
    for (int round = 0; round < 6; ++round) {
      for (int i = 0; i < 300; ++i) {
        const size_t at = random.below(present.size());
        const uint32_t id = present[at];
        ASSERT_EQ(spd.remove(id), reference.remove(id));
        ASSERT_FALSE(spd.remove(id));
        present[at] = present.back();
        present.pop_back();
        if (random.chance(0.5)) {
          const Policy p = random.policy(id);
          ASSERT_TRUE(spd.add(p));
          ASSERT_TRUE(reference.add(p));
          present.push_back(id);
        }
        if (!present.empty() && random.chance(0.1)) {
          const Policy duplicate = random.policy(present[random.below(present.size())]);
          ASSERT_FALSE(spd.add(duplicate));
          ASSERT_FALSE(reference.add(duplicate));
        }
      }
      expect_same_lookups(spd, reference, random, 300);
      if (HasFatalFailure()) return;
      ASSERT_EQ(spd.list(), reference.list());
    }
    // Down to nothing.
    for (uint32_t id : present) ASSERT_TRUE(spd.remove(id));
    EXPECT_EQ(spd.size(), 0u);
    expect_same_lookups(spd, test::LinearSpd{}, random, 50);
  }
}

// Many tunnels of one shape (the scaling case: a subnet or a port each) next to a few
// catch-all policies that tie or beat them.
TEST(SpdDifferential, ManyTunnelsOfOneShapeBesideCatchAlls) {
  RandomSpd random(7);
  Spd spd;
  test::LinearSpd reference;
  uint32_t id = 1;
  auto add = [&](const Policy& p) {
    ASSERT_TRUE(spd.add(p));
    ASSERT_TRUE(reference.add(p));
  };
  for (uint32_t tunnel = 0; tunnel < 2000; ++tunnel) {
    Policy p;
    p.id = id++;
    p.selector.local = esp::IpPrefix::parse("10.1.0.0/16").value();
    p.selector.remote =
        esp::IpPrefix::parse("10.2." + std::to_string(tunnel % 256) + ".0/24").value();
    p.selector.protocol = 17;
    p.selector.remote_ports = {static_cast<uint16_t>(20000 + tunnel / 256),
                               static_cast<uint16_t>(20000 + tunnel / 256)};
    p.priority = tunnel % 3;
    p.reqid = tunnel + 1;
    for (Direction d : {Direction::out, Direction::in, Direction::fwd}) {
      p.direction = d;
      p.id = id++;
      add(p);
    }
  }
  for (int i = 0; i < 20; ++i) add(random.policy(id++));
  for (int i = 0; i < 2000; ++i) {
    FlowKey k = random.flow();
    if (random.chance(0.7)) {
      k.source = esp::IpAddress::parse("10.1.3.4").value();
      k.destination =
          esp::IpAddress::parse("10.2." + std::to_string(random.below(256)) + ".9").value();
      k.protocol = 17;
      k.ports_known = random.chance(0.9);
      k.destination_port = k.ports_known ? static_cast<uint16_t>(20000 + random.below(9)) : 0;
    }
    for (Direction d : {Direction::out, Direction::in, Direction::fwd}) {
      const FlowKey key = d == Direction::out ? k : k.reversed();
      ASSERT_EQ(spd.lookup(d, key), reference.lookup(d, key));
    }
  }
}

}  // namespace
}  // namespace espgw::xfrm
