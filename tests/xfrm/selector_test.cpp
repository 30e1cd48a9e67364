// Selector matching: prefixes in the local -> remote orientation, protocol, port ranges,
// and what fragments (whose ports are unknown) can match.
#include "xfrm/selector.h"

#include <gtest/gtest.h>

#include "support/flow_packets.h"

namespace espgw::xfrm {
namespace {

using packet::flow_key;
using packet::FlowKey;

esp::IpPrefix prefix(std::string_view text) {
  return esp::IpPrefix::parse(text).value();
}

Selector between(std::string_view local, std::string_view remote) {
  Selector s;
  s.local = prefix(local);
  s.remote = prefix(remote);
  return s;
}

Selector lan_to_lan() {
  return between("10.1.0.0/16", "10.2.0.0/16");
}

FlowKey key(const test::Ipv4Spec& spec) {
  return flow_key(test::ipv4_packet(spec)).value();
}

TEST(Selector, MatchesAddressesInsideBothPrefixes) {
  const Selector s = lan_to_lan();
  EXPECT_TRUE(s.matches(key({})));
  EXPECT_TRUE(s.matches(key({.source = "10.1.255.255", .destination = "10.2.0.0"})));
  EXPECT_FALSE(s.matches(key({.source = "10.3.0.1"})));
  EXPECT_FALSE(s.matches(key({.destination = "10.1.0.2"})));
  // Orientation: a packet from remote to local matches only once reversed.
  const FlowKey inbound = key({.source = "10.2.0.1", .destination = "10.1.0.1"});
  EXPECT_FALSE(s.matches(inbound));
  EXPECT_TRUE(s.matches(inbound.reversed()));
}

TEST(Selector, NeverMatchesAnotherAddressFamily) {
  const Selector any_v4 = between("0.0.0.0/0", "0.0.0.0/0");
  EXPECT_TRUE(any_v4.matches(key({})));
  EXPECT_FALSE(any_v4.matches(flow_key(test::ipv6_packet({})).value()));
  const Selector any_v6 = between("::/0", "::/0");
  EXPECT_TRUE(any_v6.matches(flow_key(test::ipv6_packet({})).value()));
  EXPECT_FALSE(any_v6.matches(key({})));
}

TEST(Selector, ProtocolZeroIsAny) {
  Selector s = lan_to_lan();
  EXPECT_TRUE(s.matches(key({.protocol = 1})));
  s.protocol = 6;
  EXPECT_TRUE(s.matches(key({.protocol = 6})));
  EXPECT_FALSE(s.matches(key({.protocol = 17})));
  EXPECT_FALSE(s.matches(key({.protocol = 1})));
}

TEST(Selector, PortRangesAreInclusive) {
  Selector s = lan_to_lan();
  s.protocol = 6;
  s.remote_ports = {80, 89};
  EXPECT_TRUE(s.matches(key({.protocol = 6, .destination_port = 80})));
  EXPECT_TRUE(s.matches(key({.protocol = 6, .destination_port = 89})));
  EXPECT_FALSE(s.matches(key({.protocol = 6, .destination_port = 79})));
  EXPECT_FALSE(s.matches(key({.protocol = 6, .destination_port = 90})));
  s.local_ports = {1000, 1000};
  EXPECT_TRUE(s.matches(key({.protocol = 6, .source_port = 1000, .destination_port = 80})));
  EXPECT_FALSE(s.matches(key({.protocol = 6, .source_port = 1001, .destination_port = 80})));
}

TEST(Selector, FragmentsMatchOnlySelectorsWithoutPorts) {
  const FlowKey fragment = key({.protocol = 6, .destination_port = 80, .fragment_field = 0x2000});
  Selector by_protocol = lan_to_lan();
  by_protocol.protocol = 6;
  EXPECT_TRUE(by_protocol.matches(fragment));
  Selector by_port = by_protocol;
  by_port.remote_ports = {80, 80};
  EXPECT_FALSE(by_port.matches(fragment));
  // Even a range that covers every port but 0 needs known ports.
  by_port.remote_ports = {1, 65535};
  EXPECT_FALSE(by_port.matches(fragment));
}

TEST(Selector, PortRangesNeverMatchProtocolsWithoutPorts) {
  Selector s = lan_to_lan();
  s.local_ports = {0, 100};
  EXPECT_FALSE(s.matches(key({.protocol = 1})));
  EXPECT_TRUE(s.matches(key({.protocol = 17, .source_port = 53})));
}

TEST(Selector, SpecificityPrefersLongerPrefixesThenProtocolAndPorts) {
  const Selector wide = between("10.0.0.0/8", "10.2.0.0/16");
  const Selector narrow = lan_to_lan();
  EXPECT_GT(narrow.specificity(), wide.specificity());
  Selector tcp = narrow;
  tcp.protocol = 6;
  EXPECT_GT(tcp.specificity(), narrow.specificity());
  Selector tcp_port = tcp;
  tcp_port.remote_ports = {22, 22};
  EXPECT_GT(tcp_port.specificity(), tcp.specificity());
  // A single prefix bit outweighs protocol and both port ranges.
  Selector longer = narrow;
  longer.remote = prefix("10.2.0.0/17");
  tcp_port.local_ports = {1, 1};
  EXPECT_GT(longer.specificity(), tcp_port.specificity());
}

TEST(Selector, EqualityComparesEveryField) {
  const Selector a = lan_to_lan();
  Selector b = a;
  EXPECT_EQ(a, b);
  b.protocol = 6;
  EXPECT_NE(a, b);
  b = a;
  b.remote_ports = {1, 2};
  EXPECT_NE(a, b);
  b = a;
  b.local = prefix("10.1.0.0/17");
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace espgw::xfrm
