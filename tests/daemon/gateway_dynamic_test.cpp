// The gateway's incremental control path (what the charon plugin drives): SAs and
// policies added and removed one at a time, ECMP slots handed over at rekeys, routes
// counted per policy, and the static file's SAs left alone. A real Gateway runs: TUN
// device, raw ESP socket, rtnetlink, pipeline workers, inside a private network namespace
// the test process makes for itself (needs root; skipped with the reason otherwise).
// control_socket_test.cpp drives the same gateway through the control socket; both are one
// test program.
#include <net/if.h>
#include <netinet/in.h>
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
#include <string>
#include <vector>

#include "crypto/aead.h"
#include "daemon/gateway.h"
#include "esp/encap.h"
#include "esp/security_association.h"
#include "gtest/gtest.h"
#include "support/gateway_test_fixture.h"
#include "support/private_network_namespace.h"
#include "support/sequential_esp.h"
#include "xfrm/netlink.h"

namespace espgw::daemon {
namespace {

using namespace espgw::test;

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

}  // namespace
}  // namespace espgw::daemon

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new espgw::test::PrivateNetworkNamespace);
  return RUN_ALL_TESTS();
}
