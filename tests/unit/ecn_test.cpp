// Marking CE on decrypted inner packets (esp/ecn.h): ECN-capable packets of both families
// get CE with a header checksum that still verifies (checked with the RFC 1071 sum, not
// the incremental update under test), everything else is left alone for the caller to
// drop.
#include "esp/ecn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "esp/checksum.h"
#include "test_packets.h"

namespace espgw::esp {
namespace {

using test::ipv4_checksum_verifies;
using test::ipv4_with_tos;
using test::ipv6_with_traffic_class;

TEST(Ecn, EcnCapableIpv4GetsCeAndAValidChecksum) {
  for (const uint8_t tos : {uint8_t{0x01}, uint8_t{0x02}, uint8_t{0xB9}, uint8_t{0xBA}}) {
    SCOPED_TRACE(static_cast<int>(tos));
    auto p = ipv4_with_tos(tos);
    ASSERT_TRUE(mark_congestion_experienced(p));
    EXPECT_EQ(p[1], tos | 0x03) << "DSCP kept, ECN set to CE";
    EXPECT_TRUE(ipv4_checksum_verifies(p));
  }
}

TEST(Ecn, NotEctIsLeftForTheCallerToDrop) {
  auto v4 = ipv4_with_tos(0xB8);
  const auto v4_before = v4;
  EXPECT_FALSE(mark_congestion_experienced(v4));
  EXPECT_EQ(v4, v4_before);
  auto v6 = ipv6_with_traffic_class(0xB8);
  const auto v6_before = v6;
  EXPECT_FALSE(mark_congestion_experienced(v6));
  EXPECT_EQ(v6, v6_before);
}

TEST(Ecn, AlreadyCeStaysAsItIs) {
  auto p = ipv4_with_tos(0x03);
  const auto before = p;
  EXPECT_TRUE(mark_congestion_experienced(p));
  EXPECT_EQ(p, before);
}

TEST(Ecn, EcnCapableIpv6GetsCeInTheTrafficClass) {
  for (const uint8_t tc : {uint8_t{0x01}, uint8_t{0x02}, uint8_t{0xB9}}) {
    SCOPED_TRACE(static_cast<int>(tc));
    auto p = ipv6_with_traffic_class(tc);
    const auto before = p;
    ASSERT_TRUE(mark_congestion_experienced(p));
    const uint8_t traffic_class = static_cast<uint8_t>((p[0] & 0x0F) << 4 | p[1] >> 4);
    EXPECT_EQ(traffic_class, tc | 0x03);
    EXPECT_EQ(p[1] & 0x0F, before[1] & 0x0F) << "flow label untouched";
    EXPECT_TRUE(std::equal(p.begin() + 2, p.end(), before.begin() + 2));
  }
}

TEST(Ecn, AWrongIpv4ChecksumStaysWrong) {
  auto p = ipv4_with_tos(0x02);
  p[11] ^= 0x5A;
  ASSERT_TRUE(mark_congestion_experienced(p));
  EXPECT_FALSE(ipv4_checksum_verifies(p));
}

TEST(Ecn, TooShortOrNotIpIsRefused) {
  std::vector<uint8_t> empty;
  EXPECT_FALSE(mark_congestion_experienced(empty));
  std::vector<uint8_t> short_v4 = {0x45, 0x02, 0x00};
  EXPECT_FALSE(mark_congestion_experienced(short_v4));
  std::vector<uint8_t> header_longer_than_packet = ipv4_with_tos(0x02);
  header_longer_than_packet[0] = 0x4F;  // a 60-byte header
  header_longer_than_packet.resize(40);
  EXPECT_FALSE(mark_congestion_experienced(header_longer_than_packet));
  std::vector<uint8_t> header_too_short = ipv4_with_tos(0x02);
  header_too_short[0] = 0x44;  // 16 bytes
  EXPECT_FALSE(mark_congestion_experienced(header_too_short));
  std::vector<uint8_t> not_ip(40, 0x12);
  EXPECT_FALSE(mark_congestion_experienced(not_ip));
}

}  // namespace
}  // namespace espgw::esp
