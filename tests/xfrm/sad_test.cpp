// The SAD: SAs found by (SPI, destination), groups by reqid, handles that outlive
// removal, and lifetime state from the time an SA was added.
#include "xfrm/sad.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace espgw::xfrm {
namespace {

esp::IpAddress ip(std::string_view text) {
  return esp::IpAddress::parse(text).value();
}

SadEntry sa(uint32_t spi, std::string_view destination, Direction direction = Direction::out,
            uint32_t reqid = 1) {
  SadEntry e;
  e.config.spi = spi;
  e.config.key_material.assign(20, static_cast<uint8_t>(spi));
  e.config.tunnel_source = ip("192.0.2.1");
  e.config.tunnel_destination = ip(destination);
  e.direction = direction;
  e.reqid = reqid;
  return e;
}

TEST(Sad, FindsBySpiAndDestination) {
  Sad sad;
  ASSERT_TRUE(sad.add(sa(0x1001, "192.0.2.2")));
  ASSERT_TRUE(sad.add(sa(0x1001, "192.0.2.3")));  // same SPI, another peer
  ASSERT_TRUE(sad.add(sa(0x1001, "2001:db8::2")));
  EXPECT_EQ(sad.size(), 3u);
  auto found = sad.find(0x1001, ip("192.0.2.3"));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->entry.config.tunnel_destination, ip("192.0.2.3"));
  EXPECT_TRUE(sad.find(0x1001, ip("2001:db8::2")));
  EXPECT_FALSE(sad.find(0x1002, ip("192.0.2.2")));
  EXPECT_FALSE(sad.find(0x1001, ip("192.0.2.4")));
}

TEST(Sad, RefusesADuplicateKey) {
  Sad sad;
  ASSERT_TRUE(sad.add(sa(0x1001, "192.0.2.2")));
  EXPECT_FALSE(sad.add(sa(0x1001, "192.0.2.2", Direction::in, 7)));
  EXPECT_EQ(sad.find(0x1001, ip("192.0.2.2"))->entry.reqid, 1u);
}

TEST(Sad, RefusesSpiZeroAndForwardDirection) {
  Sad sad;
  EXPECT_THROW(sad.add(sa(0, "192.0.2.2")), std::invalid_argument);
  EXPECT_THROW(sad.add(sa(0x1001, "192.0.2.2", Direction::fwd)), std::invalid_argument);
  EXPECT_EQ(sad.size(), 0u);
}

TEST(Sad, RemoveKeepsOutstandingHandlesValid) {
  Sad sad;
  ASSERT_TRUE(sad.add(sa(0x1001, "192.0.2.2")));
  auto handle = sad.find(0x1001, ip("192.0.2.2"));
  EXPECT_TRUE(sad.remove(0x1001, ip("192.0.2.2")));
  EXPECT_FALSE(sad.remove(0x1001, ip("192.0.2.2")));
  EXPECT_FALSE(sad.find(0x1001, ip("192.0.2.2")));
  EXPECT_EQ(handle->entry.config.spi, 0x1001u);
  EXPECT_EQ(handle->entry.config.key_material.size(), 20u);
}

TEST(Sad, GroupsByDirectionAndReqid) {
  Sad sad;
  ASSERT_TRUE(sad.add(sa(0x1001, "192.0.2.2", Direction::out, 1)));
  ASSERT_TRUE(sad.add(sa(0x1002, "192.0.2.2", Direction::out, 1)));
  ASSERT_TRUE(sad.add(sa(0x2001, "192.0.2.1", Direction::in, 1)));
  ASSERT_TRUE(sad.add(sa(0x3001, "192.0.2.2", Direction::out, 2)));
  auto group = sad.group(Direction::out, 1);
  ASSERT_EQ(group.size(), 2u);
  EXPECT_EQ(group[0]->entry.config.spi, 0x1001u);
  EXPECT_EQ(group[1]->entry.config.spi, 0x1002u);
  EXPECT_EQ(sad.group(Direction::in, 1).size(), 1u);
  EXPECT_TRUE(sad.group(Direction::in, 2).empty());
}

TEST(Sad, ListIsOrderedBySpi) {
  Sad sad;
  ASSERT_TRUE(sad.add(sa(0x3000, "192.0.2.2")));
  ASSERT_TRUE(sad.add(sa(0x1000, "192.0.2.2")));
  ASSERT_TRUE(sad.add(sa(0x2000, "192.0.2.2")));
  auto all = sad.list();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->entry.config.spi, 0x1000u);
  EXPECT_EQ(all[2]->entry.config.spi, 0x3000u);
}

TEST(Sad, LifetimeSecondsCountFromAdd) {
  Sad sad;
  SadEntry e = sa(0x1001, "192.0.2.2");
  e.lifetimes = {.soft_bytes = 1000, .soft_seconds = 60, .hard_seconds = 90};
  const auto t0 = Sad::Clock::time_point{} + std::chrono::hours(1);
  ASSERT_TRUE(sad.add(e, t0));
  auto installed = sad.find(0x1001, ip("192.0.2.2"));
  EXPECT_EQ(installed->added_at, t0);
  using std::chrono::seconds;
  EXPECT_EQ(lifetime_state(*installed, 0, 0, t0 + seconds(59)), LifetimeState::none);
  EXPECT_EQ(lifetime_state(*installed, 1000, 0, t0 + seconds(59)), LifetimeState::soft);
  EXPECT_EQ(lifetime_state(*installed, 0, 0, t0 + seconds(60)), LifetimeState::soft);
  EXPECT_EQ(lifetime_state(*installed, 0, 0, t0 + seconds(90)), LifetimeState::hard);
  // A clock reading before the add counts as no time at all.
  EXPECT_EQ(lifetime_state(*installed, 0, 0, t0 - seconds(500)), LifetimeState::none);
}

TEST(Sad, EntriesCompareEveryField) {
  const SadEntry a = sa(0x1001, "192.0.2.2");
  SadEntry b = a;
  EXPECT_EQ(a, b);
  b.config.key_material[19] ^= 1;
  EXPECT_FALSE(a == b);
  b = a;
  b.config.udp_encapsulation = esp::UdpEncapsulation{};
  EXPECT_FALSE(a == b);
  b = a;
  b.lifetimes.hard_packets = 1;
  EXPECT_FALSE(a == b);
  b = a;
  b.reqid = 2;
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace espgw::xfrm
