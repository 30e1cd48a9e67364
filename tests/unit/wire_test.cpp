// Outer-header parsing and RFC 3948 demultiplexing.
#include "esp/wire.h"

#include <gtest/gtest.h>

#include "esp/encap.h"
#include "support/sequential_esp.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::esp {
namespace {

using test::decapsulate_wire;
using test::InboundSaTable;

std::vector<uint8_t> ipv4_udp(std::vector<uint8_t> payload, uint16_t flags_fragment = 0) {
  std::vector<uint8_t> p(28 + payload.size());
  p[0] = 0x45;
  store_be16(&p[2], static_cast<uint16_t>(p.size()));
  store_be16(&p[6], flags_fragment);
  p[8] = 64;
  p[9] = 17;
  p[12] = 192, p[13] = 0, p[14] = 2, p[15] = 1;
  p[16] = 192, p[17] = 0, p[18] = 2, p[19] = 2;
  store_be16(&p[20], 4500);
  store_be16(&p[22], 4500);
  store_be16(&p[24], static_cast<uint16_t>(8 + payload.size()));
  std::copy(payload.begin(), payload.end(), p.begin() + 28);
  return p;
}

TEST(Wire, NatKeepaliveIkeAndEspOverUdp) {
  WireInfo info;
  ASSERT_EQ(parse_wire(ipv4_udp({0xFF}), info), DropReason::none);
  EXPECT_EQ(info.kind, WireKind::nat_keepalive);

  ASSERT_EQ(parse_wire(ipv4_udp({0, 0, 0, 0, 0x11, 0x22}), info), DropReason::none);
  EXPECT_EQ(info.kind, WireKind::ike);
  EXPECT_EQ(info.payload_offset, 32u);
  EXPECT_EQ(info.payload_length, 2u);

  ASSERT_EQ(parse_wire(ipv4_udp({0, 0, 0x10, 0, 0, 0, 0, 1}), info), DropReason::none);
  EXPECT_EQ(info.kind, WireKind::esp);
  EXPECT_EQ(info.source.to_string(), "192.0.2.1");
  EXPECT_EQ(info.udp->source_port, 4500);

  EXPECT_EQ(parse_wire(ipv4_udp({0, 0, 0x10}), info), DropReason::too_short);
}

TEST(Wire, RejectsFragmentsAndBrokenLengths) {
  WireInfo info;
  EXPECT_EQ(parse_wire(ipv4_udp({1, 2, 3, 4, 5, 6, 7, 8}, 0x2000), info),
            DropReason::outer_fragment);
  EXPECT_EQ(parse_wire(ipv4_udp({1, 2, 3, 4, 5, 6, 7, 8}, 0x0010), info),
            DropReason::outer_fragment);
  auto p = ipv4_udp({1, 2, 3, 4, 5, 6, 7, 8});
  store_be16(&p[24], 200);  // UDP length past the end
  EXPECT_EQ(parse_wire(p, info), DropReason::malformed);
  p = ipv4_udp({1, 2, 3, 4, 5, 6, 7, 8});
  p[0] = 0x44;  // IHL 16 bytes
  EXPECT_EQ(parse_wire(p, info), DropReason::malformed);
  p = ipv4_udp({1, 2, 3, 4, 5, 6, 7, 8});
  p[9] = 6;  // TCP
  EXPECT_EQ(parse_wire(p, info), DropReason::not_esp);
  EXPECT_EQ(parse_wire(std::vector<uint8_t>{}, info), DropReason::too_short);
  EXPECT_EQ(parse_wire(std::vector<uint8_t>{0x70, 0, 0}, info), DropReason::malformed);
}

TEST(Wire, Ipv6ExtensionHeadersAreSkipped) {
  std::vector<uint8_t> p(40 + 8 + 16, 0);
  store_be32(&p[0], 0x60000000);
  store_be16(&p[4], 24);
  p[6] = 60;  // destination options, 8 bytes, then ESP
  p[7] = 64;
  p[40] = 50;
  p[41] = 0;
  store_be32(&p[48], 0x1234);
  WireInfo info;
  ASSERT_EQ(parse_wire(p, info), DropReason::none);
  EXPECT_EQ(info.kind, WireKind::esp);
  EXPECT_EQ(info.payload_offset, 48u);
  EXPECT_EQ(info.payload_length, 16u);
  p[41] = 5;  // extension header longer than the packet
  EXPECT_EQ(parse_wire(p, info), DropReason::malformed);
  p[6] = 44;  // fragment header
  EXPECT_EQ(parse_wire(p, info), DropReason::outer_fragment);
}

TEST(Wire, DecapsulateWireCountsKeepalivesAndPassesIke) {
  InboundSaTable table;
  EngineCounters engine;
  PacketBuffer keepalive;
  ASSERT_TRUE(keepalive.assign(ipv4_udp({0xFF})));
  EXPECT_EQ(decapsulate_wire(table, engine, keepalive).reason, DropReason::nat_keepalive);
  EXPECT_EQ(engine.drops(DropReason::nat_keepalive), 1u);

  PacketBuffer ike;
  ASSERT_TRUE(ike.assign(ipv4_udp({0, 0, 0, 0, 0xAA, 0xBB, 0xCC})));
  auto result = decapsulate_wire(table, engine, ike);
  EXPECT_EQ(result.reason, DropReason::none);
  EXPECT_EQ(result.kind, WireKind::ike);
  EXPECT_EQ(ike.size(), 3u);
  EXPECT_EQ(ike.data()[0], 0xAA);
}

}  // namespace
}  // namespace espgw::esp
