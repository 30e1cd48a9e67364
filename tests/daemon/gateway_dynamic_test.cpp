// The gateway's incremental control path (what the charon plugin drives): SAs and
// policies added and removed one at a time, ECMP slots handed over at rekeys, routes
// counted per policy, and the static file's SAs left alone; then the same through the
// control socket (VICI): shared policies, a charon restart, and streamed listings. A real Gateway
// runs: TUN device, raw ESP socket, rtnetlink, pipeline workers, inside a private network namespace
// the test process makes for itself (needs root; skipped with the reason otherwise). Routes are
// read back from /proc/net/route, not through espgw's netlink code.
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "crypto/aead.h"
#include "daemon/control_schema.h"
#include "daemon/control_service.h"
#include "daemon/gateway.h"
#include "esp/encap.h"
#include "esp/security_association.h"
#include "gtest/gtest.h"
#include "support/charon_requests.h"
#include "support/private_network_namespace.h"
#include "support/rfc1071_checksum.h"
#include "support/sequential_esp.h"
#include "util/byte_order.h"
#include "vici_bridge/vici_client.h"
#include "xfrm/fail_closed_routes.h"
#include "xfrm/netlink.h"

namespace espgw::daemon {
namespace {

using test::g_private_namespace_problem;

esp::IpAddress address(const char* text) {
  return *esp::IpAddress::parse(text);
}
esp::IpPrefix prefix(const char* text) {
  return *esp::IpPrefix::parse(text);
}

xfrm::SadEntry sa(xfrm::Direction direction, uint32_t spi, uint32_t reqid, uint64_t slot) {
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

xfrm::Policy out_policy(uint32_t id, uint32_t reqid, const char* remote) {
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
std::set<std::string> kernel_routes(const std::string& device) {
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

const GroupStatus* find_group(const GatewayStatus& status, uint32_t reqid) {
  for (const auto& group : status.groups)
    if (group.reqid == reqid) return &group;
  return nullptr;
}

// A small gateway on loopback: one worker, a small pool, warnings only.
GatewayConfig test_config(const char* tun_name) {
  GatewayConfig config;
  config.tun_name = tun_name;
  config.local_addresses = {address("127.0.0.1")};
  config.workers = 1;
  config.pool_packets = 256;
  config.log_level = LogLevel::warn;
  config.state_dir = "";  // counters in memory: nothing under /var/lib
  return config;
}

class GatewayDynamicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_private_namespace_problem.empty()) GTEST_SKIP() << g_private_namespace_problem;
    gateway_ = std::make_unique<Gateway>(test_config("espgwdyn0"));
  }

  std::unique_ptr<Gateway> gateway_;
};

TEST_F(GatewayDynamicTest, ThousandsOfSasComeAndGoOneAtATime) {
  constexpr uint32_t kChildren = 1500;
  for (uint32_t i = 0; i < kChildren; ++i) {
    ASSERT_TRUE(gateway_->add_dynamic_sa(sa(xfrm::Direction::out, 0x10000 + i, i + 1, 1)));
    ASSERT_TRUE(gateway_->add_dynamic_sa(sa(xfrm::Direction::in, 0x20000 + i, i + 1, 1)));
    gateway_->add_dynamic_policy(out_policy((1u << 24) + i, i + 1, "10.2.0.0/16"));
  }
  auto status = gateway_->status();
  EXPECT_EQ(status.sas.size(), 2 * kChildren);
  EXPECT_EQ(status.groups.size(), kChildren);
  EXPECT_EQ(status.policies.size(), kChildren);
  // All the policies share one remote subnet: one route.
  EXPECT_EQ(kernel_routes("espgwdyn0"), (std::set<std::string>{"0000020A/0000FFFF"}));
  EXPECT_TRUE(gateway_->spi_in_use(0x20000 + 7));
  EXPECT_FALSE(gateway_->spi_in_use(0x10000 + 7));  // outbound SPIs are the peer's

  for (uint32_t i = 0; i < kChildren; ++i) {
    ASSERT_TRUE(gateway_->remove_dynamic_sa(0x10000 + i, address("127.0.0.2")));
    ASSERT_TRUE(gateway_->remove_dynamic_sa(0x20000 + i, address("127.0.0.1")));
    ASSERT_TRUE(gateway_->remove_dynamic_policy((1u << 24) + i));
    if (i + 1 < kChildren) {
      ASSERT_EQ(kernel_routes("espgwdyn0").size(), 1u);
    }
  }
  EXPECT_FALSE(gateway_->remove_dynamic_sa(0x10000, address("127.0.0.2")));
  EXPECT_FALSE(gateway_->remove_dynamic_policy(1u << 24));
  status = gateway_->status();
  EXPECT_TRUE(status.sas.empty());
  EXPECT_TRUE(status.groups.empty());  // empty groups do not linger
  EXPECT_TRUE(status.policies.empty());
  EXPECT_TRUE(kernel_routes("espgwdyn0").empty());
  EXPECT_FALSE(gateway_->spi_in_use(0x20000 + 7));
}

TEST_F(GatewayDynamicTest, RekeyHandsTheSlotToTheNewestAndBackWhenItGoes) {
  ASSERT_TRUE(gateway_->add_dynamic_sa(sa(xfrm::Direction::out, 0xa1, 5, 42)));
  ASSERT_TRUE(gateway_->add_dynamic_sa(sa(xfrm::Direction::out, 0xb1, 5, 43)));
  ASSERT_TRUE(gateway_->add_dynamic_sa(sa(xfrm::Direction::out, 0xa2, 5, 42)));  // rekey of a1
  auto status = gateway_->status();
  auto group = find_group(status, 5);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(std::multiset<uint32_t>(group->member_spis.begin(), group->member_spis.end()),
            (std::multiset<uint32_t>{0xa2, 0xb1}));

  // The new SA goes first (a rekey collision lost): the old one carries the slot again.
  ASSERT_TRUE(gateway_->remove_dynamic_sa(0xa2, address("127.0.0.2")));
  status = gateway_->status();
  group = find_group(status, 5);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(std::multiset<uint32_t>(group->member_spis.begin(), group->member_spis.end()),
            (std::multiset<uint32_t>{0xa1, 0xb1}));

  // A usual rekey: new one in, old one out; the slot stays with the new one.
  ASSERT_TRUE(gateway_->add_dynamic_sa(sa(xfrm::Direction::out, 0xa3, 5, 42)));
  ASSERT_TRUE(gateway_->remove_dynamic_sa(0xa1, address("127.0.0.2")));
  status = gateway_->status();
  group = find_group(status, 5);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(std::multiset<uint32_t>(group->member_spis.begin(), group->member_spis.end()),
            (std::multiset<uint32_t>{0xa3, 0xb1}));
}

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
std::vector<uint8_t> counted_packet(uint32_t counter) {
  std::vector<uint8_t> p(20 + 8 + 4, 0);
  p[0] = 0x45;
  store_be16(&p[2], static_cast<uint16_t>(p.size()));
  p[8] = 64;
  p[9] = 17;
  const uint8_t source[] = {10, 2, 0, 5}, destination[] = {10, 1, 0, 1};
  std::memcpy(&p[12], source, 4);
  std::memcpy(&p[16], destination, 4);
  store_be16(&p[10], static_cast<uint16_t>(~test::rfc1071_sum(0, p.data(), 20)));
  store_be16(&p[20], 4000);
  store_be16(&p[22], 5000);
  store_be16(&p[24], 8 + 4);  // UDP checksum 0: none (IPv4)
  store_be32(&p[28], counter);
  return p;
}

// Both peers rekeyed the CHILD_SA at once: charon installs both new inbound SAs of the slot
// (here the redundant one first, as charon did in a failed CI run) and deletes the
// redundant one later; the peer sends on the other. When the new SA's first packet comes,
// the old SA still holds packets behind a lost one. They must reach the LAN before the
// new SA's packets: TCP takes a packet that overtakes its predecessors for a loss and
// retransmits. When the newest earlier SA (the redundant one) was the only one waited for,
// the old SA's held packet came after the new one, at the end of its hold time.
TEST_F(GatewayDynamicTest, AfterARekeyCollisionTheOldSasHeldPacketsStillComeFirst) {
  gateway_.reset();
  GatewayConfig config = test_config("espgwdyn0");
  config.reorder_hold = std::chrono::seconds(3);  // longer than the test waits for a packet
  gateway_ = std::make_unique<Gateway>(config);
  gateway_->start();
  // The LAN host the tunnel delivers to, and the peer's LAN routed into the tunnel (so
  // that a reverse-path check accepts what the TUN device hands in).
  xfrm::RtNetlink netlink;
  const auto added = netlink.add_address("lo", prefix("10.1.0.1/32"));
  ASSERT_TRUE(added || added.already_exists()) << added.message;  // (a repeated run)
  gateway_->add_dynamic_policy(out_policy(200, 5, "10.2.0.0/16"));
  const Socket lan(socket(AF_INET, SOCK_DGRAM, 0));
  ASSERT_GE(lan.fd, 0);
  sockaddr_storage lan_address;
  const socklen_t lan_length = io::WanSocket::make_peer(address("10.1.0.1"), 5000, lan_address);
  ASSERT_EQ(bind(lan.fd, reinterpret_cast<const sockaddr*>(&lan_address), lan_length), 0)
      << std::strerror(errno);
  const timeval wait{.tv_sec = 2, .tv_usec = 0};
  ASSERT_EQ(setsockopt(lan.fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait), 0);
  auto receive = [&]() -> std::optional<uint32_t> {
    uint8_t payload[64];
    const ssize_t n = recv(lan.fd, payload, sizeof payload, 0);
    if (n != 4) return std::nullopt;
    return load_be32(payload);
  };
  // The peer's end: ESP over a raw socket to the gateway's address (the kernel adds the
  // outer header), encrypted with the inbound SAs' own configurations.
  const Socket wan(socket(AF_INET, SOCK_RAW, IPPROTO_ESP));
  ASSERT_GE(wan.fd, 0) << std::strerror(errno);
  sockaddr_storage gateway_address;
  const socklen_t gateway_length =
      io::WanSocket::make_peer(address("127.0.0.1"), 0, gateway_address);
  auto send_esp = [&](esp::OutboundSa& peer, uint32_t counter, bool lost = false) {
    esp::PacketBuffer buffer;
    ASSERT_TRUE(buffer.assign(counted_packet(counter)));
    ASSERT_EQ(test::encapsulate(peer, buffer, esp::OuterHeaders::omit), esp::DropReason::none);
    if (lost) return;  // numbered, never sent
    const auto bytes = buffer.bytes();
    ASSERT_EQ(sendto(wan.fd, bytes.data(), bytes.size(), 0,
                     reinterpret_cast<const sockaddr*>(&gateway_address), gateway_length),
              static_cast<ssize_t>(bytes.size()))
        << std::strerror(errno);
  };

  const auto old_sa = sa(xfrm::Direction::in, 0xd1, 5, 42);
  ASSERT_TRUE(gateway_->add_dynamic_sa(old_sa));
  esp::OutboundSa old_peer(old_sa.config, crypto::ipsec_mb_backend());
  send_esp(old_peer, 1);
  EXPECT_EQ(receive(), std::optional<uint32_t>(1));
  send_esp(old_peer, 2, /*lost=*/true);
  send_esp(old_peer, 3);  // held behind number 2 for the hold time
  const auto old_sa_packets = [&] {
    for (const auto& status : gateway_->status().sas)
      if (status.spi == 0xd1) return status.packets;
    return uint64_t{0};
  };
  for (int i = 0; i < 200 && old_sa_packets() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(old_sa_packets(), 2u) << "the old SA's second packet did not arrive";

  const auto redundant_sa = sa(xfrm::Direction::in, 0xd2, 5, 42);
  const auto new_sa = sa(xfrm::Direction::in, 0xd3, 5, 42);
  ASSERT_TRUE(gateway_->add_dynamic_sa(redundant_sa));
  ASSERT_TRUE(gateway_->add_dynamic_sa(new_sa));
  esp::OutboundSa new_peer(new_sa.config, crypto::ipsec_mb_backend());
  send_esp(new_peer, 4);
  send_esp(new_peer, 5);
  std::vector<std::optional<uint32_t>> arrived;
  for (int i = 0; i < 3; ++i) arrived.push_back(receive());
  EXPECT_EQ(arrived, (std::vector<std::optional<uint32_t>>{3, 4, 5}))
      << "the LAN got the packets out of order (or one not within 2 s)";
}

TEST_F(GatewayDynamicTest, ChangedEntryReplacesAndIdenticalOneIsKept) {
  auto entry = sa(xfrm::Direction::in, 0xc1, 9, 1);
  ASSERT_TRUE(gateway_->add_dynamic_sa(entry));
  ASSERT_TRUE(gateway_->add_dynamic_sa(entry));  // identical: nothing changes
  EXPECT_EQ(gateway_->status().sas.size(), 1u);
  entry.config.key_material.assign(20, 0x77);  // same key, new keys: replaced
  ASSERT_TRUE(gateway_->add_dynamic_sa(entry));
  EXPECT_EQ(gateway_->status().sas.size(), 1u);
  EXPECT_TRUE(gateway_->spi_in_use(0xc1));
}

// RFC 4301 5.2: an inbound SA checks decrypted packets against its selectors; one without
// any would accept every inner packet, so it is never installed.
TEST_F(GatewayDynamicTest, AnInboundSaWithoutSelectorsIsRefused) {
  auto entry = sa(xfrm::Direction::in, 0xc2, 9, 1);
  entry.config.selectors.clear();
  EXPECT_FALSE(gateway_->add_dynamic_sa(entry));
  EXPECT_FALSE(gateway_->spi_in_use(0xc2));
  EXPECT_TRUE(gateway_->status().sas.empty());
}

// A static file that others may read is refused before anything is set up, as ssh
// refuses such a private key.
TEST_F(GatewayDynamicTest, AStaticFileOthersCanReadIsRefused) {
  const std::string path = "/tmp/espgw_gateway_mode_test." + std::to_string(getpid()) + ".sa";
  {
    std::ofstream file(path);
    file << "sa out spi 0x502 aes-gcm-128 key 0x1102030405060708090a0b0c0d0e0f1011121314 "
            "src 127.0.0.1 dst 127.0.0.2 reqid 7\n";
  }
  chmod(path.c_str(), 0644);
  GatewayConfig config = test_config("espgwdyn2");
  config.static_sa_file = path;
  try {
    Gateway gateway(config);
    ADD_FAILURE() << "a 0644 static file was accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(path + ": refused: mode 0644"), std::string::npos)
        << error.what();
  }
  unlink(path.c_str());
}

TEST_F(GatewayDynamicTest, RoutesAreCountedPerPolicyAndPolicyChangesMoveThem) {
  gateway_->add_dynamic_policy(out_policy(100, 1, "10.2.0.0/16"));
  gateway_->add_dynamic_policy(out_policy(101, 2, "10.2.0.0/16"));
  gateway_->add_dynamic_policy(out_policy(102, 3, "10.3.0.0/16"));
  EXPECT_EQ(kernel_routes("espgwdyn0"),
            (std::set<std::string>{"0000020A/0000FFFF", "0000030A/0000FFFF"}));
  ASSERT_TRUE(gateway_->remove_dynamic_policy(100));
  EXPECT_EQ(kernel_routes("espgwdyn0").size(), 2u);                 // 101 still needs 10.2/16
  gateway_->add_dynamic_policy(out_policy(101, 2, "10.4.0.0/16"));  // same id, new subnet
  EXPECT_EQ(kernel_routes("espgwdyn0"),
            (std::set<std::string>{"0000040A/0000FFFF", "0000030A/0000FFFF"}));
  gateway_->clear_dynamic_policies();
  EXPECT_TRUE(kernel_routes("espgwdyn0").empty());
  EXPECT_TRUE(gateway_->status().policies.empty());
}

TEST_F(GatewayDynamicTest, ClearingCharonStateKeepsTheStaticFile) {
  const std::string path = "/tmp/espgw_gateway_dynamic_test." + std::to_string(getpid()) + ".sa";
  {
    std::ofstream file(path);
    file << "sa out spi 0x501 aes-gcm-128 key 0x0102030405060708090a0b0c0d0e0f1011121314 "
            "src 127.0.0.1 dst 127.0.0.2 reqid 7\n"
            "policy out local 10.1.0.0/16 remote 10.9.0.0/16 action protect reqid 7\n";
  }
  chmod(path.c_str(), 0600);  // it holds a key: espgw refuses it readable by others
  GatewayConfig config = test_config("espgwdyn1");
  config.static_sa_file = path;
  auto gateway = std::make_unique<Gateway>(config);
  // charon can neither replace nor delete the static file's SA under its (SPI, destination).
  EXPECT_FALSE(gateway->add_dynamic_sa(sa(xfrm::Direction::out, 0x501, 7, 1)));
  EXPECT_FALSE(gateway->remove_dynamic_sa(0x501, address("127.0.0.2")));
  ASSERT_TRUE(gateway->add_dynamic_sa(sa(xfrm::Direction::out, 0x601, 8, 1)));
  gateway->add_dynamic_policy(out_policy(1u << 24, 8, "10.2.0.0/16"));
  const auto both = gateway->status(false);
  EXPECT_EQ(both.sa_count, 2u);
  EXPECT_EQ(both.charon_sa_count, 1u);
  EXPECT_EQ(gateway->clear_dynamic_sas(), 1u);
  EXPECT_EQ(gateway->clear_dynamic_policies(), 1u);
  const auto status = gateway->status();
  ASSERT_EQ(status.sas.size(), 1u);
  EXPECT_EQ(status.sas[0].spi, 0x501u);
  EXPECT_FALSE(status.sas[0].from_charon);
  ASSERT_EQ(status.policies.size(), 1u);
  EXPECT_EQ(kernel_routes("espgwdyn1"), (std::set<std::string>{"0000090A/0000FFFF"}));
  ASSERT_TRUE(gateway->reload());  // unchanged file: still exactly the static state
  EXPECT_EQ(gateway->status().sas.size(), 1u);
  gateway.reset();
  unlink(path.c_str());
}

// The same path as the charon plugin drives it: VICI commands on the control socket.
class ControlSocketTest : public GatewayDynamicTest {
 protected:
  void SetUp() override {
    GatewayDynamicTest::SetUp();
    if (IsSkipped()) return;
    path_ = "/tmp/espgw_gateway_dynamic_test." + std::to_string(getpid()) + ".ctl";
    control_ = std::make_unique<ControlService>(*gateway_, path_);
    control_->start();
    client_ = std::make_unique<vici::Client>(path_);
    vici::Message hello;
    hello.set("charon-instance", "test");
    ASSERT_EQ(client_->request("hello", hello).boolean("success"), true);
  }
  void TearDown() override {
    client_.reset();
    control_.reset();
    if (!path_.empty()) unlink(path_.c_str());
  }

  bool command(const char* name, const vici::Message& request) {
    return client_->request(name, request).boolean("success") == true;
  }
  // A counter of `stats`' control-socket section.
  std::optional<uint64_t> control_stat(const char* name) {
    const vici::Message stats = client_->request("stats");
    const auto* section = stats.section("control-socket");
    return section ? section->number(name) : std::nullopt;
  }
  static vici::Message add_sa(uint32_t spi, bool inbound, uint32_t reqid) {
    return test::add_sa_request(spi, reqid, inbound, "127.0.0.1", "127.0.0.2",
                                std::string(20, static_cast<char>(spi)));
  }
  static vici::Message out_policy(bool with_action, uint32_t reqid = 1) {
    return test::policy_request("out", {"10.1.0.0/16"}, {"10.2.0.0/16"},
                                with_action ? std::optional<uint32_t>(reqid) : std::nullopt);
  }

  std::string path_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<vici::Client> client_;
};

TEST_F(ControlSocketTest, ListingsStreamToRegisteredClientsAndFitInTheAnswerOtherwise) {
  for (uint32_t i = 0; i < 50; ++i) {
    ASSERT_TRUE(command("add-sa", add_sa(0xc0000100 + i, true, i + 1)));
    ASSERT_TRUE(command("add-sa", add_sa(0x100 + i, false, i + 1)));
  }
  // Not registered: every SA in the answer, as before streaming existed.
  const auto whole = client_->request("list-sas");
  ASSERT_NE(whole.section("sas"), nullptr);
  EXPECT_EQ(whole.section("sas")->entries().size(), 100u);
  EXPECT_EQ(whole.number("streamed"), 0u);
  ASSERT_NE(whole.section("groups"), nullptr);
  EXPECT_EQ(whole.section("groups")->entries().size(), 50u);

  // Registered: one list-sa event per SA, each naming it, and an answer without them.
  client_->subscribe("list-sa");
  std::set<std::string> streamed;
  const auto answer = client_->request("list-sas", {}, [&](const vici::Packet& event) {
    EXPECT_EQ(event.name, "list-sa");
    for (const auto& entry : event.message.entries()) streamed.insert(entry.name);
  });
  EXPECT_EQ(streamed.size(), 100u);
  EXPECT_EQ(streamed.count("0xc0000107/127.0.0.1"), 1u);
  EXPECT_EQ(answer.number("streamed"), 100u);
  EXPECT_EQ(answer.section("sas"), nullptr);
  EXPECT_EQ(answer.section("groups")->entries().size(), 50u);
}

// espgwctl --json writes as numbers the values daemon/control_schema.h describes: every
// value an answer sets as digits must be described, and nothing else. (List items, such as
// a group's slots, are identifiers and stay strings.)
void expect_numbers_described(const std::string& request, const vici::Section& section,
                              std::vector<std::string>& path) {
  for (const auto& entry : section.entries()) {
    path.push_back(entry.name);
    if (entry.kind == vici::Section::Kind::section) {
      expect_numbers_described(request, *entry.child, path);
    } else if (entry.kind == vici::Section::Kind::value) {
      const bool digits =
          !entry.value.empty() && entry.value.find_first_not_of("0123456789") == std::string::npos;
      std::string where = request;
      for (const auto& name : path) where += " / " + name;
      EXPECT_EQ(is_number(request, path), digits) << where << " = " << entry.value;
    }
    path.pop_back();
  }
}

TEST_F(ControlSocketTest, EveryNumberOfTheAnswersIsDescribedAsOne) {
  ASSERT_TRUE(command("add-sa", add_sa(0xc0000300, true, 1)));
  ASSERT_TRUE(command("add-sa", add_sa(0x300, false, 1)));
  ASSERT_TRUE(command("add-policy", out_policy(true)));
  for (const char* request : {"stats", "list-sas", "list-policies"}) {
    const vici::Message answer = client_->request(request);
    ASSERT_EQ(answer.boolean("success"), true) << request;
    std::vector<std::string> path;
    expect_numbers_described(request, answer, path);
  }
}

TEST_F(ControlSocketTest, SharedPolicyKeepsItsRouteUntilItsLastUserGoes) {
  // Two CHILD_SAs with the same selectors share one policy (charon adds it twice).
  ASSERT_TRUE(command("add-policy", out_policy(true, 1)));
  ASSERT_TRUE(command("add-policy", out_policy(true, 2)));  // the newest reqid wins
  auto status = gateway_->status();
  ASSERT_EQ(status.policies.size(), 1u);
  EXPECT_EQ(status.policies[0].reqid, 2u);
  EXPECT_EQ(kernel_routes("espgwdyn0"), (std::set<std::string>{"0000020A/0000FFFF"}));
  ASSERT_TRUE(command("del-policy", out_policy(false)));
  EXPECT_EQ(gateway_->status().policies.size(), 1u);
  EXPECT_EQ(kernel_routes("espgwdyn0").size(), 1u);
  ASSERT_TRUE(command("del-policy", out_policy(false)));
  EXPECT_TRUE(gateway_->status().policies.empty());
  EXPECT_TRUE(kernel_routes("espgwdyn0").empty());
  EXPECT_FALSE(command("del-policy", out_policy(false)));  // "not found"
}

TEST_F(ControlSocketTest, ANewCharonInstanceTakesTheOldOnesStateAway) {
  ASSERT_TRUE(command("add-sa", add_sa(0xc0000200, true, 1)));
  ASSERT_TRUE(command("add-policy", out_policy(true)));
  ASSERT_EQ(gateway_->status().sas.size(), 1u);
  vici::Message hello;
  hello.set("charon-instance", "restarted");
  ASSERT_TRUE(command("hello", hello));
  const auto status = gateway_->status();
  EXPECT_TRUE(status.sas.empty());
  EXPECT_TRUE(status.policies.empty());
  EXPECT_TRUE(kernel_routes("espgwdyn0").empty());
  EXPECT_FALSE(gateway_->spi_in_use(0xc0000200));
}

// An SA expiry that happens while no charon listens for events (the plugin reconnecting)
// waits and goes out when charon says hello again; before, it was logged and lost, and
// the SA was never rekeyed.
TEST_F(ControlSocketTest, AnExpiryWithoutCharonIsDeliveredAtItsNextHello) {
  auto request = add_sa(0xc0000300, true, 1);
  request.set("soft-seconds", uint64_t{1});
  request.set("hard-seconds", uint64_t{3600});
  ASSERT_TRUE(command("add-sa", request));
  auto gone = add_sa(0xc0000301, true, 2);  // deleted before charon is back: not sent
  gone.set("soft-seconds", uint64_t{1});
  ASSERT_TRUE(command("add-sa", gone));
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  gateway_->enforce_lifetimes();  // nobody registered for sa-expire
  gateway_->enforce_lifetimes();  // reported once only
  EXPECT_EQ(control_stat("expiries-pending"), 2u);
  vici::Message id;
  id.set("spi", uint64_t{0xc0000301});
  id.set("dst", "127.0.0.1");
  ASSERT_TRUE(command("del-sa", id));

  vici::Client events(path_);
  events.subscribe("sa-expire");
  EXPECT_FALSE(events.next_event(std::chrono::milliseconds(50)));  // not before the hello
  vici::Message hello;
  hello.set("charon-instance", "test");  // the same charon, reconnected
  ASSERT_TRUE(command("hello", hello));
  const auto event = events.next_event(std::chrono::seconds(2));
  ASSERT_TRUE(event);
  EXPECT_EQ(event->name, "sa-expire");
  EXPECT_EQ(event->message.number("spi"), 0xc0000300u);
  EXPECT_EQ(event->message.boolean("hard"), false);
  EXPECT_FALSE(events.next_event(std::chrono::milliseconds(50)));  // nothing for the deleted SA
  EXPECT_EQ(control_stat("expiries-pending"), 0u);
  EXPECT_EQ(control_stat("expiries-sent-late"), 1u);
}

// A new charon never knew the old one's SAs: their queued expiries go with them.
TEST_F(ControlSocketTest, ARestartedCharonGetsNoExpiriesOfTheOldOne) {
  auto request = add_sa(0xc0000310, true, 1);
  request.set("soft-seconds", uint64_t{1});
  ASSERT_TRUE(command("add-sa", request));
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  gateway_->enforce_lifetimes();
  vici::Client events(path_);
  events.subscribe("sa-expire");
  vici::Message hello;
  hello.set("charon-instance", "restarted");
  ASSERT_TRUE(command("hello", hello));
  EXPECT_FALSE(events.next_event(std::chrono::milliseconds(100)));
  EXPECT_EQ(control_stat("expiries-pending"), 0u);
}

// A packet that meets a protect policy without SA (a trap) raises an acquire for charon:
// none while nobody listens (counted), one per interval once the plugin is registered,
// with the packet's addresses, protocol and ports, and none once the SA is there. The
// packet itself is dropped either way.
TEST_F(ControlSocketTest, ATrappedPacketRaisesPacedAcquiresForARegisteredCharon) {
  gateway_->start();
  xfrm::RtNetlink netlink;
  const auto added = netlink.add_address("lo", prefix("10.1.0.1/32"));
  ASSERT_TRUE(added || added.already_exists()) << added.message;
  ASSERT_TRUE(command("add-policy", out_policy(true, 7)));
  const Socket lan(socket(AF_INET, SOCK_DGRAM, 0));
  ASSERT_GE(lan.fd, 0);
  sockaddr_storage from, to;
  const socklen_t from_length = io::WanSocket::make_peer(address("10.1.0.1"), 5000, from);
  const socklen_t to_length = io::WanSocket::make_peer(address("10.2.0.2"), 9, to);
  ASSERT_EQ(bind(lan.fd, reinterpret_cast<const sockaddr*>(&from), from_length), 0)
      << std::strerror(errno);
  auto send_packet = [&] {
    ASSERT_EQ(sendto(lan.fd, "trap", 4, 0, reinterpret_cast<const sockaddr*>(&to), to_length), 4)
        << std::strerror(errno);
  };
  auto stat = [&](const char* name) { return client_->request("stats").number(name).value_or(0); };
  auto wait_for = [&](const char* name, uint64_t value) {
    for (int i = 0; i < 100 && stat(name) != value; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return stat(name);
  };

  send_packet();  // nobody registered for acquire: counted, not queued
  EXPECT_EQ(wait_for("acquires-no-charon", 1), 1u);
  EXPECT_EQ(stat("acquires"), 0u);
  const auto paced_at = std::chrono::steady_clock::now();
  vici::Client events(path_);
  events.subscribe("acquire");
  send_packet();  // within the interval of the first: paced
  EXPECT_EQ(wait_for("acquires-paced", 1), 1u);
  EXPECT_FALSE(events.next_event(std::chrono::milliseconds(50)));

  std::this_thread::sleep_until(paced_at +
                                std::chrono::milliseconds(AcquireRaiser::kIntervalMs + 100));
  for (int i = 0; i < 50; ++i) send_packet();
  const auto event = events.next_event(std::chrono::seconds(2));
  ASSERT_TRUE(event);
  EXPECT_EQ(event->name, "acquire");
  EXPECT_EQ(event->message.number("reqid"), 7u);
  EXPECT_EQ(*event->message.value("src"), "10.1.0.1");
  EXPECT_EQ(*event->message.value("dst"), "10.2.0.2");
  EXPECT_EQ(event->message.number("proto"), 17u);
  EXPECT_EQ(event->message.number("src-port"), 5000u);
  EXPECT_EQ(event->message.number("dst-port"), 9u);
  EXPECT_FALSE(events.next_event(std::chrono::milliseconds(100)));  // one for the 50
  EXPECT_EQ(stat("acquires"), 1u);
  EXPECT_EQ(wait_for("acquires-paced", 50), 50u);

  // With an SA in the group, no acquire: the packets go out through it.
  ASSERT_TRUE(command("add-sa", add_sa(0x700, false, 7)));
  std::this_thread::sleep_for(std::chrono::milliseconds(AcquireRaiser::kIntervalMs + 100));
  auto no_sa = [&] {
    const vici::Message stats = client_->request("stats");
    const auto* drops = stats.section("gateway-drops");
    return drops ? drops->number("no-sa").value_or(0) : 0;
  };
  const uint64_t dropped = no_sa();
  EXPECT_GE(dropped, 52u);  // every packet before the SA
  send_packet();
  EXPECT_FALSE(events.next_event(std::chrono::milliseconds(200)));
  EXPECT_EQ(stat("acquires"), 1u);
  EXPECT_EQ(no_sa(), dropped);
  gateway_->stop();  // no TUN reader left to call the control service as it goes
}

}  // namespace
}  // namespace espgw::daemon

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new espgw::test::PrivateNetworkNamespace);
  return RUN_ALL_TESTS();
}
