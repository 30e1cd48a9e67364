// Rules sent as libnftnl's netlink messages (xfrm/nftables_rule_batch.h) against the same
// rules sent as nft text through libnftables, in a real kernel, in a private network
// namespace the test process creates for itself (needs root; without it every test is
// skipped with the reason): the kernel holds the same expressions (nft's netlink debug
// listing of both tables) and nft prints the same rules, for every shape of a one-policy
// rule; positions and deletions by handle land as the text's do; a batch the kernel
// refuses changes nothing.
#include <nftables/libnftables.h>
#include <sched.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "xfrm/firewall_rules.h"
#include "xfrm/kernel_firewall.h"
#include "xfrm/nftables_rule_batch.h"

namespace espgw::xfrm {
namespace {

std::string g_skip_reason;  // empty once the namespace is entered

// unshare() moves the calling thread; gtest runs environments and every test on the main
// thread. Listing tests (ctest's discovery) runs no environment and needs no privilege.
class PrivateNetworkNamespace : public ::testing::Environment {
 public:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) == 0) return;
    g_skip_reason = std::string("unshare(CLONE_NEWNET) failed: ") + std::strerror(errno) +
                    " -- these tests need root (CAP_SYS_ADMIN) for a private netns";
  }
};
const auto* const g_environment = ::testing::AddGlobalTestEnvironment(new PrivateNetworkNamespace);

esp::IpPrefix prefix(const std::string& text) {
  return *esp::IpPrefix::parse(text);
}

// The nft command's output, run in this thread's namespace (a child inherits it).
std::string nft_cli(const std::string& arguments) {
  std::string output;
  FILE* pipe = popen(("nft " + arguments + " 2>&1").c_str(), "r");
  if (!pipe) return output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  pclose(pipe);
  return output;
}

// A table's listing (`flags`: "" or "--debug=netlink", which prints each rule's
// expressions as the kernel gave them), its name and TUN name written the same for both.
std::string normalised(const std::string& tun_name, const std::string& flags = "") {
  std::string listing = nft_cli(flags + " list table inet " + firewall_table_name(tun_name));
  listing = std::regex_replace(listing, std::regex(firewall_table_name(tun_name)), "TABLE");
  listing = std::regex_replace(listing, std::regex("\"" + tun_name + "\""), "\"TUN\"");
  // The debug listing heads each rule with its handle and position.
  listing = std::regex_replace(listing, std::regex("(TABLE [a-z_]+)( [0-9]+)+"), "$1");
  return std::regex_replace(listing, std::regex(" packets [0-9]+ bytes [0-9]+"), "");
}

const char* chain_of(const Policy& policy) {
  switch (policy.direction) {
    case Direction::in:
      return "input";
    case Direction::fwd:
      return "forward";
    case Direction::out:
      break;
  }
  return "output";
}

// Every field a one-policy rule can have, in each form nft writes it differently: byte-aligned
// and other prefix lengths, host and "any" prefixes, ports single and ranged on either side,
// each protocol form and verdict.
std::vector<Policy> every_shape() {
  struct Sides {
    const char* local;
    const char* remote;
  };
  const std::vector<Sides> sides = {
      {"10.1.0.0/16", "10.2.0.0/16"},     {"10.1.2.3/32", "0.0.0.0/0"},
      {"0.0.0.0/0", "10.2.0.0/17"},       {"10.128.0.0/9", "192.168.7.8/31"},
      {"128.0.0.0/1", "10.2.3.0/24"},     {"0.0.0.0/0", "0.0.0.0/0"},
      {"fd00:1::/64", "fd00:2::/48"},     {"fd00:1::5/128", "::/0"},
      {"2001:db8::/33", "fd00:2::4/127"}, {"::/0", "fd00:2:0:2::/63"},
  };
  struct Transport {
    uint8_t protocol;
    PortRange local, remote;
  };
  const PortRange any;
  const std::vector<Transport> transports = {
      {0, any, any},
      {1, any, any},
      {17, any, {20001, 20001}},
      {6, {1000, 2000}, any},
      {6, {443, 443}, {1024, 65535}},
      {132, {0, 0}, {7, 9}},
      {1, {8, 8}, any},  // ICMP: a selector's "port" is the type
  };
  std::vector<Policy> policies;
  uint32_t id = 0;
  for (const auto& side : sides)
    for (const auto& transport : transports)
      for (const Direction direction : {Direction::in, Direction::fwd, Direction::out}) {
        Policy p;
        p.id = ++id;
        p.direction = direction;
        p.selector.local = prefix(side.local);
        p.selector.remote = prefix(side.remote);
        p.selector.protocol = transport.protocol;
        p.selector.local_ports = transport.local;
        p.selector.remote_ports = transport.remote;
        p.action = id % 3 == 0   ? PolicyAction::bypass
                   : id % 3 == 1 ? PolicyAction::protect
                                 : PolicyAction::discard;
        p.reqid = p.action == PolicyAction::protect ? 1 : 0;
        policies.push_back(p);
      }
  return policies;
}

class NftablesRuleBatchNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_skip_reason.empty()) GTEST_SKIP() << g_skip_reason;
    for (const char* tun : {"text0", "nl0"}) {
      const Result result = kernel_.run(firewall_table(tun, {}), "empty table");
      ASSERT_TRUE(result.ok) << result.message;
    }
  }
  void TearDown() override {
    if (!g_skip_reason.empty()) return;
    for (const char* tun : {"text0", "nl0"}) kernel_.run(firewall_removal(tun), "removal");
  }
  // The handles of the rules of `chain` in table `tun`, in order.
  std::vector<uint64_t> handles(const std::string& tun, const std::string& chain) {
    const std::string listing =
        nft_cli("-a list chain inet " + firewall_table_name(tun) + " " + chain);
    std::vector<uint64_t> found;
    const std::regex handle(" # handle ([0-9]+)");
    for (auto it = std::sregex_iterator(listing.begin(), listing.end(), handle);
         it != std::sregex_iterator(); ++it)
      if (it->position() > static_cast<long>(listing.find("policy accept;")))
        found.push_back(std::stoull((*it)[1]));
    return found;
  }
  KernelFirewall kernel_;
};

TEST_F(NftablesRuleBatchNetns, EveryShapeReadsBackAsItsText) {
  const std::vector<Policy> policies = every_shape();
  std::string text;
  NftablesRuleBatch batch(firewall_table_name("nl0"));
  size_t built = 0;
  for (const auto& policy : policies) {
    ASSERT_TRUE(NftablesRuleBatch::builds(policy)) << firewall_match(policy);
    text += "add rule inet " + firewall_table_name("text0") + " " + chain_of(policy) + " " +
            firewall_policy_rule(policy).single + "\n";
    batch.insert(chain_of(policy), policy, 0);
    ++built;
  }
  const Result by_text = kernel_.run(text, "text");
  ASSERT_TRUE(by_text.ok) << by_text.message;
  const Result by_netlink = batch.commit("netlink");
  ASSERT_TRUE(by_netlink.ok) << by_netlink.message;
  const std::string listing = normalised("nl0");
  EXPECT_EQ(listing, normalised("text0"));
  // The expressions of the policies' chains (the two tables' own chains name their TUNs).
  const auto policy_chains = [](const std::string& debug_listing) {
    return debug_listing.substr(
        std::min(debug_listing.find("inet TABLE input"), debug_listing.size()));
  };
  const std::string expressions = policy_chains(normalised("nl0", "--debug=netlink"));
  EXPECT_EQ(expressions, policy_chains(normalised("text0", "--debug=netlink")));
  EXPECT_NE(expressions.find("[ bitwise reg 1"), std::string::npos) << expressions;
  // Every rule is there (the listing is not two empty tables).
  size_t rules = 0;
  for (const char* chain : {"input", "forward", "output"}) rules += handles("nl0", chain).size();
  EXPECT_EQ(rules, built);
  EXPECT_NE(listing.find("udp dport 20001"), std::string::npos) << listing;
  EXPECT_NE(listing.find("ip6 saddr 2001:db8::/33"), std::string::npos) << listing;
}

TEST_F(NftablesRuleBatchNetns, PositionsAndDeletionsLandAsTheTextsDo) {
  std::vector<Policy> policies = every_shape();
  policies.resize(12);
  for (auto& policy : policies) policy.direction = Direction::in;
  // Rules 0, 4 and 8 first; then 1-3 before 4, 5-7 before 8, 9-11 at the end; then 4 goes.
  const std::string text_table = "inet " + firewall_table_name("text0") + " input ";
  std::string first_text;
  NftablesRuleBatch first(firewall_table_name("nl0"));
  for (const size_t i : {0, 4, 8}) {
    first_text += "add rule " + text_table + firewall_policy_rule(policies[i]).single + "\n";
    first.insert("input", policies[i], 0);
  }
  ASSERT_TRUE(kernel_.run(first_text, "text").ok);
  ASSERT_TRUE(first.commit("netlink").ok);
  const auto text_handles = handles("text0", "input");
  const auto netlink_handles = handles("nl0", "input");
  ASSERT_EQ(text_handles.size(), 3u);
  ASSERT_EQ(netlink_handles.size(), 3u);
  std::string second_text;
  NftablesRuleBatch second(firewall_table_name("nl0"));
  for (size_t i = 1; i < 12; ++i) {
    if (i % 4 == 0) continue;
    const size_t anchor = i / 4 + 1;  // the index in the handles of the rule it goes before
    const std::string rule = firewall_policy_rule(policies[i]).single;
    if (anchor < 3) {
      second_text += "insert rule " + text_table + "position " +
                     std::to_string(text_handles[anchor]) + " " + rule + "\n";
      second.insert("input", policies[i], netlink_handles[anchor]);
    } else {
      second_text += "add rule " + text_table + rule + "\n";
      second.insert("input", policies[i], 0);
    }
  }
  second_text += "delete rule " + text_table + "handle " + std::to_string(text_handles[1]) + "\n";
  second.remove("input", netlink_handles[1]);
  const Result by_text = kernel_.run(second_text, "text");
  ASSERT_TRUE(by_text.ok) << by_text.message;
  const Result by_netlink = second.commit("netlink");
  ASSERT_TRUE(by_netlink.ok) << by_netlink.message;
  EXPECT_EQ(handles("nl0", "input").size(), 11u);
  EXPECT_EQ(normalised("nl0"), normalised("text0"));
}

TEST_F(NftablesRuleBatchNetns, ABatchTheKernelRefusesChangesNothing) {
  const std::vector<Policy> policies = every_shape();
  NftablesRuleBatch first(firewall_table_name("nl0"));
  first.insert(chain_of(policies[0]), policies[0], 0);
  ASSERT_TRUE(first.commit("netlink").ok);
  const std::string before = normalised("nl0");
  // A new rule, then the deletion of a rule that is not there: all or nothing.
  NftablesRuleBatch refused(firewall_table_name("nl0"));
  refused.insert(chain_of(policies[1]), policies[1], 0);
  refused.remove("input", 999999);
  const Result result = refused.commit("refused");
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.message.find("handle 999999"), std::string::npos) << result.message;
  EXPECT_EQ(normalised("nl0"), before);
  // Nor does a position that is not there.
  NftablesRuleBatch unplaced(firewall_table_name("nl0"));
  unplaced.insert(chain_of(policies[1]), policies[1], 999999);
  EXPECT_FALSE(unplaced.commit("unplaced").ok);
  EXPECT_EQ(normalised("nl0"), before);
}

TEST(NftablesRuleBatch, ShapesNftWouldReadItsOwnWayAreLeftToTheText) {
  Policy p;
  p.selector.local = prefix("10.1.0.0/16");
  p.selector.remote = prefix("10.2.0.0/16");
  EXPECT_TRUE(NftablesRuleBatch::builds(p));
  Policy ports_without_protocol = p;
  ports_without_protocol.selector.remote_ports = {53, 53};
  EXPECT_FALSE(NftablesRuleBatch::builds(ports_without_protocol));
  Policy host_bits = p;
  host_bits.selector.remote.address.bytes[3] = 1;  // 10.2.0.1/16
  EXPECT_FALSE(NftablesRuleBatch::builds(host_bits));
  Policy mixed = p;
  mixed.selector.remote = prefix("fd00::/64");
  EXPECT_FALSE(NftablesRuleBatch::builds(mixed));
}

}  // namespace
}  // namespace espgw::xfrm
