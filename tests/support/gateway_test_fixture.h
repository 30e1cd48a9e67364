// What the gateway tests share: a small real Gateway in the private network namespace the
// test process makes for itself (tests/support/private_network_namespace.h), and the SAs,
// policies and kernel routes the tests build and read back.
#pragma once

#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/gateway.h"
#include "esp/ip_address.h"
#include "gtest/gtest.h"
#include "support/private_network_namespace.h"
#include "support/rfc1071_checksum.h"
#include "util/byte_order.h"
#include "xfrm/fail_closed_routes.h"
#include "xfrm/netlink.h"
#include "xfrm/policy.h"
#include "xfrm/sad_entry.h"

namespace espgw::test {

inline esp::IpAddress address(const char* text) {
  return *esp::IpAddress::parse(text);
}
inline esp::IpPrefix prefix(const char* text) {
  return *esp::IpPrefix::parse(text);
}

inline xfrm::SadEntry sa(xfrm::Direction direction, uint32_t spi, uint32_t reqid, uint64_t slot) {
  xfrm::SadEntry entry;
  entry.direction = direction;
  entry.reqid = reqid;
  entry.group_slot = slot;
  entry.config.spi = spi;
  entry.config.key_material.assign(20, static_cast<uint8_t>(spi));
  const bool out = direction == xfrm::Direction::out;
  entry.config.tunnel_source = address(out ? "127.0.0.1" : "127.0.0.2");
  entry.config.tunnel_destination = address(out ? "127.0.0.2" : "127.0.0.1");
  // An inbound SA without selectors is refused (it would accept any inner packet).
  if (!out) entry.config.selectors.push_back({prefix("10.2.0.0/16"), prefix("10.1.0.0/16")});
  return entry;
}

inline xfrm::Policy out_policy(uint32_t id, uint32_t reqid, const char* remote) {
  xfrm::Policy policy;
  policy.id = id;
  policy.direction = xfrm::Direction::out;
  policy.selector.local = prefix("10.1.0.0/16");
  policy.selector.remote = prefix(remote);
  policy.reqid = reqid;
  return policy;
}

// Destinations of the routes through `device`, as the kernel lists them.
// espgw's routes through `device`, as /proc/net/route writes them (hex, as the bytes lie):
// they live in the instance's own table (xfrm/fail_closed_routes.h), and /proc/net/route
// shows only the main one.
inline std::set<std::string> kernel_routes(const std::string& device) {
  xfrm::RtNetlink netlink;
  std::vector<xfrm::RtNetlink::TableRoute> routes;
  EXPECT_TRUE(netlink.list_routes(xfrm::routing_ids_for(device).table, routes).ok);
  const uint32_t index = if_nametoindex(device.c_str());
  std::set<std::string> texts;
  for (const auto& route : routes) {
    if (route.type != xfrm::RtNetlink::RouteType::unicast || route.output_interface != index ||
        route.destination.address.family != 4)
      continue;
    uint32_t destination = 0;
    std::memcpy(&destination, route.destination.address.bytes.data(), 4);
    const uint8_t length = route.destination.length;
    const uint32_t mask = length == 0 ? 0 : htonl(~uint32_t{0} << (32 - length));
    char text[24];
    std::snprintf(text, sizeof text, "%08X/%08X", destination, mask);
    texts.insert(text);
  }
  return texts;
}

inline const daemon::GroupStatus* find_group(const daemon::GatewayStatus& status, uint32_t reqid) {
  for (const auto& group : status.groups)
    if (group.reqid == reqid) return &group;
  return nullptr;
}

// A small gateway on loopback: one worker, a small pool, warnings only.
inline daemon::GatewayConfig test_config(const char* tun_name) {
  daemon::GatewayConfig config;
  config.tun_name = tun_name;
  config.local_addresses = {address("127.0.0.1")};
  config.workers = 1;
  config.pool_packets = 256;
  config.log_level = daemon::LogLevel::warn;
  config.state_dir = "";  // counters in memory: nothing under /var/lib
  return config;
}

class GatewayDynamicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_private_namespace_problem.empty()) GTEST_SKIP() << g_private_namespace_problem;
    gateway_ = std::make_unique<daemon::Gateway>(test_config("espgwdyn0"));
  }

  std::unique_ptr<daemon::Gateway> gateway_;
};

// A socket file descriptor that closes itself.
struct Socket {
  explicit Socket(int descriptor) : fd(descriptor) {}
  ~Socket() {
    if (fd >= 0) close(fd);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd;
};

// An IPv4 UDP packet 10.2.0.5:4000 -> 10.1.0.1:5000 whose payload is `counter`. The
// header checksum is right: the kernel checks it when the TUN device hands the packet in.
inline std::vector<uint8_t> counted_packet(uint32_t counter) {
  std::vector<uint8_t> p(20 + 8 + 4, 0);
  p[0] = 0x45;
  store_be16(&p[2], static_cast<uint16_t>(p.size()));
  p[8] = 64;
  p[9] = 17;
  const uint8_t source[] = {10, 2, 0, 5}, destination[] = {10, 1, 0, 1};
  std::memcpy(&p[12], source, 4);
  std::memcpy(&p[16], destination, 4);
  store_be16(&p[10], static_cast<uint16_t>(~rfc1071_sum(0, p.data(), 20)));
  store_be16(&p[20], 4000);
  store_be16(&p[22], 5000);
  store_be16(&p[24], 8 + 4);  // UDP checksum 0: none (IPv4)
  store_be32(&p[28], counter);
  return p;
}

}  // namespace espgw::test
