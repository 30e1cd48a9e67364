// Flow keys from inner packets: addresses, upper-layer protocol, and ports only where
// every piece of the datagram would show the same ones.
#include "packet/flow_key.h"

#include <gtest/gtest.h>

#include "support/flow_packets.h"

namespace espgw::packet {
namespace {

using test::ipv4_packet;
using test::ipv6_packet;

esp::IpAddress ip(std::string_view text) {
  return esp::IpAddress::parse(text).value();
}

TEST(FlowKey, Ipv4UdpHasAddressesProtocolAndPorts) {
  auto key = flow_key(ipv4_packet({}));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->source, ip("10.1.0.1"));
  EXPECT_EQ(key->destination, ip("10.2.0.1"));
  EXPECT_EQ(key->protocol, 17);
  EXPECT_TRUE(key->ports_known);
  EXPECT_EQ(key->source_port, 1000);
  EXPECT_EQ(key->destination_port, 2000);
}

TEST(FlowKey, TcpAndSctpCarryPortsIcmpDoesNot) {
  for (uint8_t protocol : {6, 132, 136}) {
    auto key = flow_key(ipv4_packet({.protocol = protocol, .source_port = 22}));
    ASSERT_TRUE(key);
    EXPECT_TRUE(key->ports_known) << int{protocol};
    EXPECT_EQ(key->source_port, 22);
  }
  auto icmp = flow_key(ipv4_packet({.protocol = 1}));
  ASSERT_TRUE(icmp);
  EXPECT_EQ(icmp->protocol, 1);
  EXPECT_FALSE(icmp->ports_known);
  EXPECT_EQ(icmp->source_port, 0);
}

TEST(FlowKey, Ipv4OptionsAreSkipped) {
  auto key = flow_key(ipv4_packet({.destination_port = 53, .option_words = 3}));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->destination_port, 53);
}

TEST(FlowKey, Ipv4FragmentsHaveNoPortsButKeepTheProtocol) {
  // First piece (MF set, offset 0), a middle piece, the last piece (offset only).
  for (uint16_t field : {0x2000, 0x2010, 0x0010}) {
    auto key = flow_key(ipv4_packet({.protocol = 6, .fragment_field = field}));
    ASSERT_TRUE(key) << field;
    EXPECT_EQ(key->protocol, 6);
    EXPECT_FALSE(key->ports_known) << field;
  }
  // DF alone is not a fragment.
  EXPECT_TRUE(flow_key(ipv4_packet({.fragment_field = 0x4000}))->ports_known);
}

TEST(FlowKey, MalformedPacketsHaveNoKey) {
  EXPECT_FALSE(flow_key({}));
  auto packet = ipv4_packet({});
  EXPECT_FALSE(flow_key(std::span(packet).first(19)));
  // Truncated inside the port field.
  EXPECT_FALSE(flow_key(std::span(packet).first(23)));
  EXPECT_TRUE(flow_key(std::span(packet).first(24)));
  // IHL below 5, and IHL beyond the packet.
  auto bad_ihl = packet;
  bad_ihl[0] = 0x44;
  EXPECT_FALSE(flow_key(bad_ihl));
  bad_ihl[0] = 0x4F;
  EXPECT_FALSE(flow_key(bad_ihl));
  // Neither version 4 nor 6.
  auto not_ip = packet;
  not_ip[0] = 0x55;
  EXPECT_FALSE(flow_key(not_ip));
  // A fragment needs no ports, so a bare header is enough.
  auto fragment = ipv4_packet({.fragment_field = 0x0010});
  EXPECT_TRUE(flow_key(std::span(fragment).first(20)));
}

TEST(FlowKey, Ipv6UdpHasAddressesProtocolAndPorts) {
  auto key = flow_key(ipv6_packet({}));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->source, ip("fd00:1::1"));
  EXPECT_EQ(key->destination, ip("fd00:2::1"));
  EXPECT_EQ(key->protocol, 17);
  EXPECT_TRUE(key->ports_known);
  EXPECT_EQ(key->destination_port, 2000);
}

TEST(FlowKey, Ipv6ExtensionHeadersAreWalked) {
  auto key = flow_key(ipv6_packet(
      {.protocol = 6, .source_port = 443, .hop_by_hop = true, .destination_options = true}));
  ASSERT_TRUE(key);
  EXPECT_EQ(key->protocol, 6);
  EXPECT_TRUE(key->ports_known);
  EXPECT_EQ(key->source_port, 443);
}

TEST(FlowKey, Ipv6FragmentsHaveNoPorts) {
  for (uint16_t field : {0x0001, 0x0100, 0x0101}) {  // first, last, middle piece
    auto key = flow_key(ipv6_packet({.protocol = 6, .fragment = true, .fragment_field = field}));
    ASSERT_TRUE(key) << field;
    EXPECT_EQ(key->protocol, 6);
    EXPECT_FALSE(key->ports_known) << field;
  }
}

TEST(FlowKey, Ipv6AtomicFragmentKeepsItsPorts) {
  // RFC 6946: offset 0 without the M flag is a whole datagram.
  auto key = flow_key(ipv6_packet({.protocol = 6, .fragment = true, .fragment_field = 0}));
  ASSERT_TRUE(key);
  EXPECT_TRUE(key->ports_known);
  EXPECT_EQ(key->source_port, 1000);
}

TEST(FlowKey, TruncatedIpv6HeadersHaveNoKey) {
  auto packet = ipv6_packet({.hop_by_hop = true});
  EXPECT_FALSE(flow_key(std::span(packet).first(39)));
  EXPECT_FALSE(flow_key(std::span(packet).first(47)));  // inside the options header
  EXPECT_FALSE(flow_key(std::span(packet).first(51)));  // inside the ports
  EXPECT_TRUE(flow_key(std::span(packet).first(52)));
  // An options header whose length runs past the end.
  auto long_options = packet;
  long_options[41] = 200;
  EXPECT_FALSE(flow_key(long_options));
  auto fragment = ipv6_packet({.fragment = true, .fragment_field = 0x0100});
  EXPECT_FALSE(flow_key(std::span(fragment).first(47)));
  EXPECT_TRUE(flow_key(std::span(fragment).first(48)));
}

TEST(FlowKey, ReversedSwapsAddressesAndPorts) {
  auto key = flow_key(ipv4_packet({})).value();
  auto back = key.reversed();
  EXPECT_EQ(back.source, key.destination);
  EXPECT_EQ(back.destination, key.source);
  EXPECT_EQ(back.source_port, 2000);
  EXPECT_EQ(back.destination_port, 1000);
  EXPECT_EQ(back.protocol, key.protocol);
  EXPECT_EQ(back.reversed(), key);
}

}  // namespace
}  // namespace espgw::packet
