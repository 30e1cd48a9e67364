// Which local address's sockets an SA or an IKE packet uses, and which SAs a gateway of
// several WAN addresses refuses (daemon/wan_endpoints.h). Sockets on loopback, no root.
#include "daemon/wan_endpoints.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace espgw::daemon {
namespace {

esp::IpAddress ip(const char* text) {
  return *esp::IpAddress::parse(text);
}

xfrm::SadEntry sa(xfrm::Direction direction, const char* source, const char* destination) {
  xfrm::SadEntry entry;
  entry.direction = direction;
  entry.config.spi = 0x1234;
  entry.config.tunnel_source = ip(source);
  entry.config.tunnel_destination = ip(destination);
  return entry;
}

// The address a socket is bound to, as the kernel reports it.
std::string bound_address(const io::WanSocket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  EXPECT_EQ(getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in&>(address).sin_addr, text, sizeof text);
  else
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

TEST(WanEndpoints, FindsTheEndpointOfEachLocalAddressOnly) {
  WanEndpoints wan({ip("192.0.2.1"), ip("2001:db8::1"), ip("198.51.100.1")});
  ASSERT_EQ(wan.all().size(), 3u);
  EXPECT_EQ(wan.find(ip("2001:db8::1")), wan.all()[1].get());
  EXPECT_EQ(wan.find(ip("198.51.100.1")), wan.all()[2].get());
  EXPECT_EQ(wan.find(ip("192.0.2.2")), nullptr);
  EXPECT_EQ(wan.find(ip("::ffff:192.0.2.1")), nullptr) << "a mapped address is IPv6";
  // The first address keeps the socket names of a single-address gateway.
  EXPECT_EQ(wan.all()[0]->prefix, "");
  EXPECT_EQ(wan.all()[1]->prefix, "a1-");
  EXPECT_EQ(wan.list(), "192.0.2.1, 2001:db8::1, 198.51.100.1");
}

TEST(WanEndpoints, AnSaUsesTheAddressOfItsLocalEnd) {
  WanEndpoints wan({ip("192.0.2.1"), ip("2001:db8::1")});
  const auto out = sa(xfrm::Direction::out, "2001:db8::1", "2001:db8::2");
  const auto in = sa(xfrm::Direction::in, "2001:db8::2", "2001:db8::1");
  EXPECT_EQ(local_end(out), ip("2001:db8::1")) << "outbound: its source";
  EXPECT_EQ(local_end(in), ip("2001:db8::1")) << "inbound: its destination";
  EXPECT_FALSE(wan.refusal(out));
  EXPECT_FALSE(wan.refusal(in));
  EXPECT_FALSE(wan.refusal(sa(xfrm::Direction::out, "192.0.2.1", "192.0.2.2")));
}

TEST(WanEndpoints, RefusesAnSaWhoseLocalEndIsNoLocalAddress) {
  WanEndpoints wan({ip("192.0.2.1"), ip("2001:db8::1")});
  const auto out = wan.refusal(sa(xfrm::Direction::out, "192.0.2.9", "192.0.2.2"));
  ASSERT_TRUE(out);
  EXPECT_EQ(*out,
            "SA out spi 0x00001234: its source 192.0.2.9 is not a local-address of this "
            "gateway (192.0.2.1, 2001:db8::1)");
  // An inbound SA whose destination is the peer (a mirrored file) is refused too.
  const auto in = wan.refusal(sa(xfrm::Direction::in, "192.0.2.1", "192.0.2.2"));
  ASSERT_TRUE(in);
  EXPECT_NE(in->find("its destination 192.0.2.2 is not a local-address"), std::string::npos) << *in;
}

TEST(WanEndpoints, IkeLeavesFromTheSourceCharonNamesOrTheFirstOfThePeersFamily) {
  WanEndpoints wan({ip("192.0.2.1"), ip("2001:db8::1"), ip("2001:db8::5")});
  const auto& all = wan.all();
  EXPECT_EQ(wan.for_ike(ip("2001:db8::5"), ip("2001:db8::2")), all[2].get());
  EXPECT_EQ(wan.for_ike(std::nullopt, ip("2001:db8::2")), all[1].get());
  EXPECT_EQ(wan.for_ike(ip("::"), ip("2001:db8::2")), all[1].get()) << "unspecified";
  EXPECT_EQ(wan.for_ike(ip("0.0.0.0"), ip("192.0.2.2")), all[0].get());
  EXPECT_EQ(wan.for_ike(ip("192.0.2.7"), ip("192.0.2.2")), nullptr) << "not ours";
  EXPECT_EQ(wan.for_ike(ip("192.0.2.1"), ip("2001:db8::2")), nullptr) << "family mismatch";
  WanEndpoints v4_only({ip("192.0.2.1")});
  EXPECT_EQ(v4_only.for_ike(std::nullopt, ip("2001:db8::2")), nullptr);
}

// The sockets an endpoint opens are bound to its address: what an SA of that local end
// sends from (checked with the kernel's view of the socket).
TEST(WanEndpoints, SocketsAreBoundToTheirEndpointsAddress) {
  WanEndpoints wan({ip("127.0.0.1"), ip("::1")});
  io::WanSocketOptions options;
  options.buffer_bytes = 65536;
  for (auto& endpoint : wan.all()) {
    try {
      endpoint->udp.push_back(
          std::make_unique<io::WanSocket>(io::WanKind::udp, endpoint->address, 0, options));
    } catch (const std::exception& error) {
      GTEST_SKIP() << "no " << endpoint->address.to_string() << " here: " << error.what();
    }
  }
  for (const char* source : {"::1", "127.0.0.1"}) {
    const auto out = sa(xfrm::Direction::out, source, source);
    ASSERT_FALSE(wan.refusal(out));
    WanEndpoint* endpoint = wan.find(local_end(out));
    ASSERT_NE(endpoint, nullptr);
    EXPECT_EQ(bound_address(*endpoint->udp.front()), source);
    EXPECT_EQ(endpoint->udp.front()->local(), ip(source));
  }
}

}  // namespace
}  // namespace espgw::daemon
