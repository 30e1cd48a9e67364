// RFC 4301 5.2: a decrypted packet must match one of its inbound SA's selectors, by
// addresses, next-layer protocol and ports; packets whose ports are unknown (non-first
// fragments, truncated headers) match only selectors of any port.
#include <gtest/gtest.h>

#include <vector>

#include "esp/decap.h"
#include "esp/encap.h"
#include "support/sequential_esp.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::esp {
namespace {

using test::decapsulate;
using test::encapsulate;
using test::InboundSaTable;

using crypto::AeadAlgorithm;

constexpr uint8_t kTcp = 6, kUdp = 17, kIcmp = 1;

// Inner packets go 10.1.0.1 -> 10.2.0.1 (fd00:1::1 -> fd00:2::1), UDP 5000 -> 6000: the
// inbound SA's remote side is the source.
TrafficSelector selector(uint8_t protocol = 0, uint16_t source_first = 0,
                         uint16_t source_last = 65535, uint16_t destination_first = 0,
                         uint16_t destination_last = 65535, bool ipv6 = false) {
  return {*IpPrefix::parse(ipv6 ? "fd00:1::/64" : "10.1.0.0/16"),
          *IpPrefix::parse(ipv6 ? "fd00:2::/64" : "10.2.0.0/16"),
          protocol,
          source_first,
          source_last,
          destination_first,
          destination_last};
}

// Seals `inner` with an SA whose inbound side has `selectors` and opens it again.
DropReason round_trip(const std::vector<TrafficSelector>& selectors,
                      const std::vector<uint8_t>& inner) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  config.selectors = selectors;
  OutboundSa out(config, crypto::openssl_backend());
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::openssl_backend()));
  EngineCounters engine;
  PacketBuffer packet;
  EXPECT_TRUE(packet.assign(inner));
  EXPECT_EQ(encapsulate(out, packet, OuterHeaders::omit), DropReason::none);
  const DropReason reason = decapsulate(table, engine, packet);
  if (reason == DropReason::policy_mismatch) {
    EXPECT_EQ(table.find(config.spi)->counters().drops(DropReason::policy_mismatch), 1u);
  }
  return reason;
}

std::vector<uint8_t> ipv4(uint8_t protocol, uint16_t source_port = 5000,
                          uint16_t destination_port = 6000) {
  auto p = test::make_ipv4_packet(20);
  p[9] = protocol;
  store_be16(&p[20], source_port);
  store_be16(&p[22], destination_port);
  return p;
}

// A fragment of the UDP packet: `offset` in 8-byte units, more fragments to come.
std::vector<uint8_t> ipv4_fragment(uint16_t offset) {
  auto p = test::make_ipv4_packet(20, 0xAB, false);
  store_be16(&p[6], static_cast<uint16_t>(0x2000 | offset));  // MF
  return p;
}

// The IPv6 UDP packet with extension headers inserted before the UDP header: `kinds`
// are next-header values (0 hop-by-hop, 60 destination options, 44 fragment).
std::vector<uint8_t> ipv6_with(std::vector<uint8_t> kinds, uint16_t fragment_offset = 0) {
  auto base = test::make_ipv6_packet(20);
  std::vector<uint8_t> p(base.begin(), base.begin() + 40);
  std::vector<uint8_t> udp(base.begin() + 40, base.end());
  p[6] = kinds.empty() ? kUdp : kinds[0];
  for (size_t i = 0; i < kinds.size(); ++i) {
    const uint8_t next = i + 1 < kinds.size() ? kinds[i + 1] : kUdp;
    std::vector<uint8_t> header(8, 0);
    header[0] = next;
    if (kinds[i] == 44)
      store_be16(&header[2], static_cast<uint16_t>(fragment_offset << 3 | 1));
    else
      header[1] = 0;                                                    // 8 bytes
    if (kinds[i] == 0 || kinds[i] == 60) header[2] = 1, header[3] = 4;  // PadN of 4
    p.insert(p.end(), header.begin(), header.end());
  }
  p.insert(p.end(), udp.begin(), udp.end());
  store_be16(&p[4], static_cast<uint16_t>(p.size() - 40));
  return p;
}

TEST(InboundSelectors, ProtocolAndPortsAreChecked) {
  EXPECT_EQ(round_trip({selector(kUdp, 5000, 5000, 6000, 6000)}, ipv4(kUdp)), DropReason::none);
  EXPECT_EQ(round_trip({selector(kUdp)}, ipv4(kUdp)), DropReason::none);
  EXPECT_EQ(round_trip({selector(kUdp, 0, 65535, 6000, 6010)}, ipv4(kUdp)), DropReason::none);
  EXPECT_EQ(round_trip({selector(kUdp, 5000, 5000, 6000, 6000)}, ipv4(kUdp, 5000, 6001)),
            DropReason::policy_mismatch);
  EXPECT_EQ(round_trip({selector(kUdp, 5001, 5010)}, ipv4(kUdp)), DropReason::policy_mismatch);
  EXPECT_EQ(round_trip({selector(kTcp)}, ipv4(kUdp)), DropReason::policy_mismatch);
  // TCP ports sit where UDP's do.
  EXPECT_EQ(round_trip({selector(kTcp, 5000, 5000, 6000, 6000)}, ipv4(kTcp)), DropReason::none);
  // The second selector matches when the first does not.
  EXPECT_EQ(round_trip({selector(kTcp), selector(kUdp, 0, 65535, 6000, 6000)}, ipv4(kUdp)),
            DropReason::none);
  // Addresses still count: the right protocol from outside the remote prefix is dropped.
  TrafficSelector elsewhere = selector(kUdp);
  elsewhere.remote = *IpPrefix::parse("10.9.0.0/16");
  EXPECT_EQ(round_trip({elsewhere}, ipv4(kUdp)), DropReason::policy_mismatch);
}

TEST(InboundSelectors, NonFirstFragmentsMatchOnlyAnyPorts) {
  // RFC 4301 4.4.1.1: a non-first fragment has no ports.
  EXPECT_EQ(round_trip({selector(kUdp, 5000, 5000, 6000, 6000)}, ipv4_fragment(100)),
            DropReason::policy_mismatch);
  EXPECT_EQ(round_trip({selector(kUdp)}, ipv4_fragment(100)), DropReason::none);
  EXPECT_EQ(round_trip({selector(0)}, ipv4_fragment(100)), DropReason::none);
  EXPECT_EQ(round_trip({selector(kTcp)}, ipv4_fragment(100)), DropReason::policy_mismatch);
  // The first fragment carries the UDP header.
  EXPECT_EQ(round_trip({selector(kUdp, 5000, 5000, 6000, 6000)}, ipv4_fragment(0)),
            DropReason::none);
}

TEST(InboundSelectors, TruncatedTransportHeaderHasNoPorts) {
  auto p = ipv4(kUdp);
  p.resize(22);  // two bytes of the UDP header
  store_be16(&p[2], 22);
  EXPECT_EQ(round_trip({selector(kUdp, 5000, 5000)}, p), DropReason::policy_mismatch);
  EXPECT_EQ(round_trip({selector(kUdp)}, p), DropReason::none);
}

TEST(InboundSelectors, IcmpTypeAndCodeStandForPorts) {
  auto echo = ipv4(kIcmp);
  echo[20] = 8;  // echo request
  echo[21] = 0;
  const auto echo_only = selector(kIcmp, 0x0800, 0x08FF, 0x0800, 0x08FF);
  EXPECT_EQ(round_trip({echo_only}, echo), DropReason::none);
  // Only one side naming the type is enough; the other side's "any" passes.
  EXPECT_EQ(round_trip({selector(kIcmp, 0x0800, 0x08FF)}, echo), DropReason::none);
  auto reply = echo;
  reply[20] = 0;
  EXPECT_EQ(round_trip({echo_only}, reply), DropReason::policy_mismatch);
}

TEST(InboundSelectors, Ipv6ExtensionHeadersAreSkipped) {
  const auto exact = selector(kUdp, 5000, 5000, 6000, 6000, true);
  const auto wrong_port = selector(kUdp, 5000, 5000, 6001, 6001, true);
  EXPECT_EQ(round_trip({exact}, ipv6_with({})), DropReason::none);
  EXPECT_EQ(round_trip({exact}, ipv6_with({0, 60})), DropReason::none);
  EXPECT_EQ(round_trip({wrong_port}, ipv6_with({0, 60})), DropReason::policy_mismatch);
  // First fragment: the UDP header follows; non-first: no ports, the protocol is known.
  EXPECT_EQ(round_trip({exact}, ipv6_with({44}, 0)), DropReason::none);
  EXPECT_EQ(round_trip({exact}, ipv6_with({44}, 100)), DropReason::policy_mismatch);
  EXPECT_EQ(round_trip({selector(kUdp, 0, 65535, 0, 65535, true)}, ipv6_with({44}, 100)),
            DropReason::none);
  EXPECT_EQ(round_trip({selector(kTcp, 0, 65535, 0, 65535, true)}, ipv6_with({0, 44}, 100)),
            DropReason::policy_mismatch);
}

TEST(InboundSelectors, AddressOnlySelectorsAcceptAnyProtocol) {
  EXPECT_EQ(round_trip({selector()}, ipv4(kTcp)), DropReason::none);
  EXPECT_EQ(round_trip({selector()}, ipv4_fragment(100)), DropReason::none);
  EXPECT_EQ(round_trip({selector(0, 0, 65535, 0, 65535, true)}, ipv6_with({0, 44}, 100)),
            DropReason::none);
}

}  // namespace
}  // namespace espgw::esp
