// The SA record: what names an SA, and the comparisons that tell a changed SA from the
// same one installed again (with its key, and without it once the key is wiped).
#include "xfrm/sad_entry.h"

#include <gtest/gtest.h>

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

TEST(SadEntry, EntriesCompareEveryField) {
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

TEST(SadEntry, SameExceptKeyIgnoresOnlyTheKey) {
  const SadEntry a = sa(0x1001, "192.0.2.2");
  SadEntry b = a;
  b.config.key_material[19] ^= 1;
  EXPECT_TRUE(same_except_key(a, b));
  b.config.key_material.clear();  // a copy whose key was wiped
  EXPECT_TRUE(same_except_key(a, b));
  b.group_slot = 7;
  EXPECT_FALSE(same_except_key(a, b));
  b = a;
  b.direction = Direction::in;
  EXPECT_FALSE(same_except_key(a, b));
}

TEST(SadEntry, IdIsSpiAndDestination) {
  const SaId id = sa_id_of(sa(0x1001, "192.0.2.2"));
  EXPECT_EQ(id, (SaId{0x1001, ip("192.0.2.2")}));
  EXPECT_LT(id, (SaId{0x1001, ip("192.0.2.3")}));
  EXPECT_NE(id, sa_id_of(sa(0x1001, "2001:db8::2")));
}

}  // namespace
}  // namespace espgw::xfrm
