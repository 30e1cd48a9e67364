// Route-based VPN (daemon/route_interfaces.h): two peers' 0.0.0.0/0 policies, each on its
// own interface id, coexist; a packet the routing table sends into one interface leaves
// through that interface's SA only; an inbound SA delivers into its interface's device;
// an interface id espgw.conf does not name is refused. Through the control socket, as the
// charon plugin sends them, against a real Gateway (TUN devices, sockets, routes) in a
// private network namespace the test process makes for itself (needs root; skipped with
// the reason otherwise).
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "crypto/aead.h"
#include "daemon/charon_messages.h"
#include "daemon/control_service.h"
#include "daemon/gateway.h"
#include "esp/security_association.h"
#include "gtest/gtest.h"
#include "support/charon_requests.h"
#include "support/gateway_test_fixture.h"
#include "support/private_network_namespace.h"
#include "support/sequential_esp.h"
#include "util/byte_order.h"
#include "vici_bridge/vici_client.h"
#include "xfrm/netlink.h"

namespace espgw::daemon {
namespace {

using test::address;
using test::g_private_namespace_problem;
using test::Socket;

void run(const std::string& command) {
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

// A UDP socket's descriptor, bound to `ip`:`port`, whose receives wait at most 2 s.
int bound_udp(const char* ip, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_storage at;
  const socklen_t length = io::WanSocket::make_peer(address(ip), port, at);
  EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&at), length), 0) << std::strerror(errno);
  const timeval wait{.tv_sec = 2, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  return fd;
}

class RouteInterfacesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_private_namespace_problem.empty()) GTEST_SKIP() << g_private_namespace_problem;
    GatewayConfig config;
    config.tun_name = "rvdefault";
    config.interfaces = {{1, "rvpeer1"}, {2, "rvpeer2"}};
    config.local_addresses = {address("127.0.0.1")};
    config.workers = 1;
    config.pool_packets = 256;
    config.log_level = LogLevel::warn;
    config.state_dir = "";
    gateway_ = std::make_unique<Gateway>(config);
    path_ = "/tmp/espgw_route_interfaces_test." + std::to_string(getpid()) + ".ctl";
    control_ = std::make_unique<ControlService>(*gateway_, path_);
    control_->start();
    client_ = std::make_unique<vici::Client>(path_);
    vici::Message hello;
    hello.set("charon-instance", "test");
    ASSERT_EQ(client_->request("hello", hello).boolean("success"), true);
  }
  void TearDown() override {
    if (gateway_) gateway_->stop();
    client_.reset();
    control_.reset();
    if (!path_.empty()) unlink(path_.c_str());
  }

  vici::Message request(const char* name, const vici::Message& message) {
    return client_->request(name, message);
  }
  bool command(const char* name, const vici::Message& message) {
    return request(name, message).boolean("success") == true;
  }
  // A peer's CHILD_SA as charon installs it with if_id_in = if_id_out = `if_id` and
  // local_ts = remote_ts = 0.0.0.0/0: out and in policy, outbound SA in UDP to the peer's
  // port `peer_port` (so the test can receive what it sends), inbound SA.
  void add_peer(uint32_t if_id, uint32_t reqid, uint32_t out_spi, uint32_t in_spi,
                uint16_t peer_port) {
    for (const char* direction : {"out", "in"}) {
      auto policy = test::policy_request(direction, {"0.0.0.0/0"}, {"0.0.0.0/0"}, reqid);
      policy.set("if-id", if_id);
      ASSERT_TRUE(command("add-policy", policy)) << direction << " policy of if_id " << if_id;
    }
    auto out = test::add_sa_request(out_spi, reqid, false, "127.0.0.1", "127.0.0.2",
                                    std::string(20, static_cast<char>(out_spi)));
    out.set_bool("encap", true);
    out.set("src-port", 4500);
    out.set("dst-port", peer_port);
    out.set("if-id", if_id);
    ASSERT_TRUE(command("add-sa", out));
    auto in = in_sa(in_spi, reqid);
    in.set("if-id", if_id);
    ASSERT_TRUE(command("add-sa", in));
  }
  static vici::Message in_sa(uint32_t spi, uint32_t reqid) {
    auto in = test::add_sa_request(spi, reqid, true, "127.0.0.1", "127.0.0.2",
                                   std::string(20, static_cast<char>(spi)));
    in.set_list("src-ts", {"0.0.0.0/0"});
    in.set_list("dst-ts", {"0.0.0.0/0"});
    return in;
  }
  uint64_t stat(const char* name) { return client_->request("stats").number(name).value_or(0); }
  uint64_t gateway_drop(const char* name) {
    const vici::Message stats = client_->request("stats");
    const auto* drops = stats.section("gateway-drops");
    return drops ? drops->number(name).value_or(0) : 0;
  }

  std::unique_ptr<Gateway> gateway_;
  std::string path_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<vici::Client> client_;
};

TEST_F(RouteInterfacesTest, TwoPeersZeroSelectorsTheRouteChoosesTheTunnel) {
  add_peer(1, 11, 0x1111, 0x1122, 4601);
  add_peer(2, 22, 0x2233, 0x2244, 4602);
  // Four policies: the two peers' identical selectors are kept apart by their if_id.
  const auto policies = gateway_->status().policies;
  ASSERT_EQ(policies.size(), 4u);
  std::set<uint32_t> if_ids;
  for (const auto& policy : policies) if_ids.insert(policy.if_id);
  EXPECT_EQ(if_ids, (std::set<uint32_t>{1, 2}));
  for (const auto& sa : gateway_->status().sas)
    EXPECT_EQ(sa.interface, sa.reqid == 11 ? "rvpeer1" : "rvpeer2") << std::hex << sa.spi;

  gateway_->start();
  run("ip addr add 10.1.0.1/32 dev lo");
  // The operator's routes (espgw adds none for route-based policies).
  run("ip route add 10.9.1.0/24 dev rvpeer1");
  run("ip route add 10.9.2.0/24 dev rvpeer2");
  run("ip route add 10.9.3.0/24 dev rvdefault");
  const Socket peer1(bound_udp("127.0.0.2", 4601));
  const Socket peer2(bound_udp("127.0.0.2", 4602));
  const Socket lan(bound_udp("10.1.0.1", 5000));
  auto send_to = [&](const char* destination) {
    sockaddr_storage to;
    const socklen_t length = io::WanSocket::make_peer(address(destination), 9, to);
    ASSERT_EQ(sendto(lan.fd, "data", 4, 0, reinterpret_cast<const sockaddr*>(&to), length), 4)
        << std::strerror(errno);
  };
  // The SPI of the next ESP-in-UDP datagram a peer receives, or nothing within 2 s.
  auto spi_at = [](const Socket& peer) -> std::optional<uint32_t> {
    uint8_t datagram[2048];
    const ssize_t n = recv(peer.fd, datagram, sizeof datagram, 0);
    if (n < 8) return std::nullopt;
    return load_be32(datagram);
  };
  send_to("10.9.1.7");
  EXPECT_EQ(spi_at(peer1), std::optional<uint32_t>(0x1111));
  send_to("10.9.2.7");
  EXPECT_EQ(spi_at(peer2), std::optional<uint32_t>(0x2233));
  send_to("10.9.1.8");
  EXPECT_EQ(spi_at(peer1), std::optional<uint32_t>(0x1111));
  // The default device has no policy of its own: the interfaces' 0.0.0.0/0 are not its.
  const uint64_t no_policy = gateway_drop("no-policy");
  send_to("10.9.3.7");
  for (int i = 0; i < 100 && gateway_drop("no-policy") == no_policy; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(gateway_drop("no-policy"), no_policy + 1);

  // Inbound: peer 1's SA delivers into rvpeer1, where the LAN socket sees it arrive.
  run("ip route add 10.2.0.0/16 dev rvpeer1");  // the reverse path of what comes in
  const int on = 1;
  ASSERT_EQ(setsockopt(lan.fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on), 0);
  const Socket wan(socket(AF_INET, SOCK_RAW, IPPROTO_ESP));
  ASSERT_GE(wan.fd, 0) << std::strerror(errno);
  auto in_entry = std::get<xfrm::SadEntry>(sa_from_add_sa(in_sa(0x1122, 11)));
  esp::OutboundSa peer(in_entry.config, crypto::ipsec_mb_backend());
  const std::vector<uint8_t> inner = test::counted_packet(77);
  esp::PacketBuffer buffer;
  ASSERT_TRUE(buffer.assign(inner));
  ASSERT_EQ(test::encapsulate(peer, buffer, esp::OuterHeaders::omit), esp::DropReason::none);
  sockaddr_storage gateway_address;
  const socklen_t gateway_length =
      io::WanSocket::make_peer(address("127.0.0.1"), 0, gateway_address);
  const auto bytes = buffer.bytes();
  ASSERT_EQ(sendto(wan.fd, bytes.data(), bytes.size(), 0,
                   reinterpret_cast<const sockaddr*>(&gateway_address), gateway_length),
            static_cast<ssize_t>(bytes.size()));
  uint8_t payload[64];
  alignas(cmsghdr) uint8_t control[256];
  iovec iov{payload, sizeof payload};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ASSERT_EQ(recvmsg(lan.fd, &message, 0), 4) << "nothing delivered within 2 s";
  EXPECT_EQ(load_be32(payload), 77u);
  unsigned arrived_on = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c))
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO)
      arrived_on = reinterpret_cast<const in_pktinfo*>(CMSG_DATA(c))->ipi_ifindex;
  EXPECT_EQ(arrived_on, if_nametoindex("rvpeer1"));

  // One peer's tunnel goes; the other's keeps its policies.
  for (const char* direction : {"out", "in"}) {
    auto policy = test::policy_request(direction, {"0.0.0.0/0"}, {"0.0.0.0/0"}, std::nullopt);
    policy.set("if-id", 1);
    EXPECT_TRUE(command("del-policy", policy));
  }
  const auto left = gateway_->status().policies;
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].if_id, 2u);
  EXPECT_EQ(left[1].if_id, 2u);
}

TEST_F(RouteInterfacesTest, AnInterfaceIdWithoutADeviceIsRefused) {
  auto policy = test::policy_request("out", {"0.0.0.0/0"}, {"0.0.0.0/0"}, 5);
  policy.set("if-id", 9);
  const auto answer = request("add-policy", policy);
  EXPECT_EQ(answer.boolean("success"), false);
  EXPECT_NE(answer.value("errmsg")->find("interface id 9 has no TUN device"), std::string::npos)
      << *answer.value("errmsg");
  auto sa = in_sa(0x901, 5);
  sa.set("if-id", 9);
  EXPECT_FALSE(command("add-sa", sa));
  EXPECT_EQ(stat("interface-refused"), 2u);
  EXPECT_TRUE(gateway_->status().policies.empty());
  EXPECT_TRUE(gateway_->status().sas.empty());
  // Below the control socket too: the SA table has no sink for it.
  auto entry = std::get<xfrm::SadEntry>(sa_from_add_sa(sa));
  EXPECT_FALSE(gateway_->add_dynamic_sa(entry));
}

}  // namespace
}  // namespace espgw::daemon

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new espgw::test::PrivateNetworkNamespace);
  return RUN_ALL_TESTS();
}
