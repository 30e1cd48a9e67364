// The table espgw builds (xfrm/kernel_firewall.h) loaded into a real kernel, in a private
// network namespace the test process creates for itself (needs root; without it every test
// is skipped with the reason): the kernel accepts every set it is given (a set of
// concatenated ranges refuses overlapping elements) and holds as many rules as expected.
#include <nftables/libnftables.h>
#include <sched.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "xfrm/kernel_firewall.h"

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

Policy policy(Direction direction, const std::string& local, const std::string& remote,
              PolicyAction action = PolicyAction::protect) {
  Policy p;
  p.direction = direction;
  p.selector.local = prefix(local);
  p.selector.remote = prefix(remote);
  p.action = action;
  p.reqid = action == PolicyAction::protect ? 1 : 0;
  return p;
}

// `nft list table`, read back through a libnftables context of the test's own.
std::string list_table(const std::string& tun_name) {
  nft_ctx* context = nft_ctx_new(NFT_CTX_DEFAULT);
  nft_ctx_buffer_output(context);
  nft_ctx_buffer_error(context);
  const std::string command = "list table inet " + firewall_table_name(tun_name);
  std::string listing;
  if (nft_run_cmd_from_buffer(context, command.c_str()) == 0)
    listing = nft_ctx_get_output_buffer(context);
  nft_ctx_free(context);
  return listing;
}

// Rules in `chain` of the listing: its lines other than the chain's header and type.
size_t rules_in(const std::string& listing, const std::string& chain) {
  const size_t begin = listing.find("chain " + chain + " {");
  if (begin == std::string::npos) return 0;
  const size_t end = listing.find("\n\t}", begin);
  size_t rules = 0;
  for (size_t at = listing.find('\n', begin) + 1; at < end; at = listing.find('\n', at) + 1)
    if (listing.compare(at, 7, "\t\ttype ") != 0) ++rules;
  return rules;
}

class KernelFirewallNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_skip_reason.empty()) GTEST_SKIP() << g_skip_reason;
  }
  void load(const FirewallSpec& spec) {
    const Result result = firewall_.run(firewall_ruleset(spec), "load");
    ASSERT_TRUE(result.ok) << result.message;
  }
  KernelFirewall firewall_;
};

TEST_F(KernelFirewallNetns, AThousandDisjointTunnelsAreOneRulePerChainPart) {
  FirewallSpec spec;
  spec.tun_name = "espgw0";
  for (int tunnel = 0; tunnel < 1000; ++tunnel) {
    const std::string remote =
        "10.2." + std::to_string(tunnel / 250) + "." + std::to_string(tunnel % 250 + 1) + "/32";
    spec.policies.push_back(policy(Direction::out, "10.1.0.0/16", remote));
    spec.policies.push_back(policy(Direction::in, "10.1.0.0/16", remote));
    spec.policies.push_back(policy(Direction::fwd, "10.1.0.0/16", remote));
    spec.fail_closed_prefixes.push_back(prefix(remote));
  }
  load(spec);
  const std::string listing = list_table(spec.tun_name);
  EXPECT_EQ(rules_in(listing, "input"), 1u) << listing.substr(0, 2000);
  // fwd, out, fail-closed.
  EXPECT_EQ(rules_in(listing, "forward"), 3u);
  EXPECT_EQ(rules_in(listing, "output"), 2u);
  EXPECT_EQ(rules_in(listing, "from_tunnel_only"), 2u);
  EXPECT_NE(listing.find("10.2.3.250"), std::string::npos);
  // Rewritten whole: loading it again replaces it.
  load(spec);
  EXPECT_EQ(rules_in(list_table(spec.tun_name), "forward"), 3u);
}

TEST_F(KernelFirewallNetns, OverlappingSelectorsAndBothFamiliesLoad) {
  FirewallSpec spec;
  spec.tun_name = "gw-1";
  spec.policies = {
      policy(Direction::fwd, "10.1.0.0/16", "10.2.0.1/32"),
      policy(Direction::fwd, "10.1.0.0/16", "10.2.0.2/32"),
      // Overlaps the first two: a new rule, as the kernel refuses overlapping elements.
      policy(Direction::fwd, "10.1.0.0/16", "10.2.0.0/16"),
      policy(Direction::fwd, "10.1.5.0/24", "10.2.0.1/32"),
      policy(Direction::fwd, "fd00:1::/64", "fd00:2::1/128"),
      policy(Direction::fwd, "fd00:1::/64", "fd00:2::2/128"),
      policy(Direction::fwd, "fd00:1::/64", "fd00:2::/64"),
      policy(Direction::fwd, "::/0", "fd00:3::/64", PolicyAction::bypass),
      policy(Direction::fwd, "::/0", "fd00:4::/64", PolicyAction::bypass),
      policy(Direction::fwd, "0.0.0.0/0", "0.0.0.0/0", PolicyAction::discard),
      // No field in common: a set of concatenated ranges.
      policy(Direction::fwd, "10.5.0.0/16", "10.6.0.1/32"),
      policy(Direction::fwd, "10.7.0.0/16", "10.6.0.2/32"),
  };
  spec.fail_closed_prefixes = {prefix("10.2.0.1/32"), prefix("10.2.0.0/16"), prefix("10.3.0.0/16"),
                               prefix("fd00:2::/64"), prefix("fd00:3::/64")};
  load(spec);
  const std::string listing = list_table(spec.tun_name);
  // {1, 2}; 3; 4 (overlaps 3 on both sides); {5, 6}; 7; {8, 9}; 10; {11, 12}; then the fail-closed
  // {10.2.0.1}; {10.2/16, 10.3/16}; {fd00:2::/64, fd00:3::/64}.
  EXPECT_EQ(rules_in(listing, "forward"), 11u) << listing;
  EXPECT_NE(listing.find("ip saddr . ip daddr {"), std::string::npos) << listing;
}

}  // namespace
}  // namespace espgw::xfrm
