// The gateway driven as the charon plugin drives it: VICI commands on the control socket
// (shared policies, a charon restart, expiries kept for the next charon, streamed
// listings, paced acquires). Linked into the gateway test program
// (gateway_dynamic_test.cpp), whose main enters the private network namespace.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control_schema.h"
#include "daemon/control_service.h"
#include "daemon/gateway.h"
#include "gtest/gtest.h"
#include "support/charon_requests.h"
#include "support/gateway_test_fixture.h"
#include "vici_bridge/vici_client.h"
#include "xfrm/netlink.h"

namespace espgw::daemon {
namespace {

using namespace espgw::test;

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
