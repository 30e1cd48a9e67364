// The nft command text espgw builds from policies (xfrm/kernel_firewall.h): no kernel
// needed. The netns scenario `failclosed` (tests/netns/site_to_site.sh) runs it for real.
#include "xfrm/kernel_firewall.h"

#include <gtest/gtest.h>

#include <random>
#include <sstream>

namespace espgw::xfrm {
namespace {

esp::IpPrefix prefix(const char* text) {
  return *esp::IpPrefix::parse(text);
}

Policy policy(uint32_t id, Direction direction, const char* local, const char* remote,
              PolicyAction action, uint32_t priority = 0) {
  Policy p;
  p.id = id;
  p.direction = direction;
  p.selector.local = prefix(local);
  p.selector.remote = prefix(remote);
  p.action = action;
  p.priority = priority;
  p.reqid = action == PolicyAction::protect ? 1 : 0;
  return p;
}

size_t position(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  EXPECT_NE(at, std::string::npos) << what << " not in\n" << text;
  return at;
}

TEST(KernelFirewall, MatchIsOrientedAsThePacketCarriesIt) {
  // In and fwd packets come from the remote side; out packets go to it.
  EXPECT_EQ(firewall_match(
                policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.0/16", PolicyAction::protect)),
            "meta nfproto ipv4 ip saddr 10.2.0.0/16 ip daddr 10.1.0.0/16");
  EXPECT_EQ(firewall_match(
                policy(1, Direction::out, "10.1.0.0/16", "10.2.0.0/16", PolicyAction::protect)),
            "meta nfproto ipv4 ip saddr 10.1.0.0/16 ip daddr 10.2.0.0/16");
  EXPECT_EQ(
      firewall_match(policy(1, Direction::in, "fd00:1::/64", "fd00:2::/64", PolicyAction::protect)),
      "meta nfproto ipv6 ip6 saddr fd00:2::/64 ip6 daddr fd00:1::/64");
}

TEST(KernelFirewall, ProtocolAndPortsWhenTheSelectorHasThem) {
  Policy p = policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.0/16", PolicyAction::protect);
  p.selector.protocol = 17;
  p.selector.local_ports = {53, 53};
  p.selector.remote_ports = {1024, 65535};
  // fwd: the remote side's port is the source port.
  EXPECT_EQ(firewall_match(p),
            "meta nfproto ipv4 ip saddr 10.2.0.0/16 ip daddr 10.1.0.0/16 meta l4proto 17 "
            "th sport 1024-65535 th dport 53");
  p.direction = Direction::out;
  EXPECT_EQ(firewall_match(p),
            "meta nfproto ipv4 ip saddr 10.1.0.0/16 ip daddr 10.2.0.0/16 meta l4proto 17 "
            "th sport 53 th dport 1024-65535");
}

TEST(KernelFirewall, AnyPrefixesStillMatchTheFamilyOnly) {
  EXPECT_EQ(
      firewall_match(policy(1, Direction::in, "0.0.0.0/0", "0.0.0.0/0", PolicyAction::discard)),
      "meta nfproto ipv4");
  EXPECT_EQ(firewall_match(policy(1, Direction::in, "::/0", "fd00:2::/64", PolicyAction::bypass)),
            "meta nfproto ipv6 ip6 saddr fd00:2::/64");
}

TEST(KernelFirewall, RulesetPerHookInPolicyOrderWithVerdicts) {
  FirewallSpec spec;
  spec.tun_name = "espgw0";
  // Spd::list() order: out first, then in, then fwd, each in lookup order.
  spec.policies = {
      policy(1, Direction::out, "10.1.0.0/16", "10.2.5.0/24", PolicyAction::bypass),
      policy(2, Direction::out, "10.1.0.0/16", "10.2.0.0/16", PolicyAction::protect),
      policy(3, Direction::in, "192.0.2.1/32", "10.2.0.0/16", PolicyAction::protect),
      policy(4, Direction::fwd, "10.1.0.0/16", "10.2.5.0/24", PolicyAction::bypass),
      policy(5, Direction::fwd, "10.1.0.0/16", "10.2.9.0/24", PolicyAction::discard),
      policy(6, Direction::fwd, "10.1.0.0/16", "10.2.0.0/16", PolicyAction::protect),
  };
  spec.fail_closed_prefixes = {prefix("10.2.0.0/16"), prefix("fd00:2::/64")};
  const std::string text = firewall_ruleset(spec);

  // Replaced whole in one transaction, whether or not it was there.
  EXPECT_EQ(text.rfind("table inet espgw_espgw0 {}\ndelete table inet espgw_espgw0\n", 0), 0u);
  const size_t input = position(text, "chain input {");
  const size_t forward = position(text, "chain forward {");
  const size_t output = position(text, "chain output {");
  position(text, "type filter hook input priority filter - 10; policy accept;");
  position(text, "chain from_tunnel_only {\n    iifname \"espgw0\" accept\n    counter drop\n");
  position(text, "chain to_tunnel_only {\n    oifname \"espgw0\" accept\n    counter drop\n");

  const size_t in_protect =
      position(text, "ip saddr 10.2.0.0/16 ip daddr 192.0.2.1/32 goto from_tunnel_only\n");
  EXPECT_GT(in_protect, input);
  EXPECT_LT(in_protect, forward);
  // fwd: bypass and discard before the protect they carve out of, as the SPD orders them.
  const size_t fwd_bypass = position(text, "ip saddr 10.2.5.0/24 ip daddr 10.1.0.0/16 accept\n");
  const size_t fwd_discard =
      position(text, "ip saddr 10.2.9.0/24 ip daddr 10.1.0.0/16 counter drop\n");
  const size_t fwd_protect =
      position(text, "ip saddr 10.2.0.0/16 ip daddr 10.1.0.0/16 goto from_tunnel_only\n");
  EXPECT_GT(fwd_bypass, forward);
  EXPECT_LT(fwd_bypass, fwd_discard);
  EXPECT_LT(fwd_discard, fwd_protect);
  EXPECT_LT(fwd_protect, output);
  // out: in the forward hook (after fwd) and the output hook, bypass first.
  const std::string out_bypass = "ip saddr 10.1.0.0/16 ip daddr 10.2.5.0/24 accept\n";
  const std::string out_protect = "ip saddr 10.1.0.0/16 ip daddr 10.2.0.0/16 goto to_tunnel_only\n";
  EXPECT_GT(text.find(out_bypass, forward), fwd_protect);
  EXPECT_LT(text.find(out_bypass, forward), text.find(out_protect, forward));
  EXPECT_LT(text.find(out_protect, forward), output);
  EXPECT_GT(text.find(out_bypass, output), output);
  EXPECT_LT(text.find(out_bypass, output), text.find(out_protect, output));
  // The fail-closed prefixes close each outbound chain.
  const std::string closed4 =
      "meta nfproto ipv4 ip daddr 10.2.0.0/16 oifname != \"espgw0\" counter drop\n";
  const std::string closed6 =
      "meta nfproto ipv6 ip6 daddr fd00:2::/64 oifname != \"espgw0\" counter drop\n";
  EXPECT_GT(text.find(closed4, forward), text.find(out_protect, forward));
  EXPECT_LT(text.find(closed6, forward), output);
  EXPECT_GT(text.find(closed4, output), text.find(out_protect, output));
  EXPECT_NE(text.find(closed6, output), std::string::npos);
  EXPECT_EQ(text.find(closed4, output), text.rfind(closed4));
}

// The forward chain's rules, one per line, without the chain's type line.
std::vector<std::string> forward_rules(const std::string& text) {
  const size_t begin = text.find("policy accept;\n", text.find("chain forward {")) + 15;
  const size_t end = text.find("  }\n", begin);
  std::vector<std::string> rules;
  for (size_t at = begin; at < end;) {
    const size_t line_end = text.find('\n', at);
    rules.push_back(text.substr(at + 4, line_end - at - 4));
    at = line_end + 1;
  }
  return rules;
}

FirewallSpec spec_of(std::vector<Policy> policies) {
  FirewallSpec spec;
  spec.tun_name = "espgw0";
  spec.policies = std::move(policies);
  return spec;
}

TEST(KernelFirewall, ConsecutiveAddressRulesWithOneVerdictShareASet) {
  // All have the LAN as destination: it is matched once, the set holds the sources only.
  const auto text = firewall_ruleset(spec_of({
      policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.1/32", PolicyAction::protect),
      policy(2, Direction::fwd, "10.1.0.0/16", "10.2.0.2/32", PolicyAction::protect),
      policy(3, Direction::fwd, "10.1.0.0/16", "10.2.0.3/32", PolicyAction::protect),
  }));
  EXPECT_EQ(forward_rules(text),
            (std::vector<std::string>{
                "meta nfproto ipv4 ip daddr 10.1.0.0/16 ip saddr { 10.2.0.1, 10.2.0.2, 10.2.0.3 } "
                "goto from_tunnel_only"}));
}

TEST(KernelFirewall, AnOverlappingSelectorStartsANewRule) {
  // 10.2.0.0/16 -> 10.1.0.0/16 overlaps the first (both sides do); the third overlaps
  // only the second, which is in the new run.
  const auto text = firewall_ruleset(spec_of({
      policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.1/32", PolicyAction::protect),
      policy(2, Direction::fwd, "10.1.0.0/16", "10.2.0.0/16", PolicyAction::protect),
      policy(3, Direction::fwd, "10.1.0.0/16", "10.2.0.2/32", PolicyAction::protect),
      // Same source as 3 but a disjoint destination: no overlap, joins 3's run.
      policy(4, Direction::fwd, "10.9.0.0/16", "10.2.0.2/32", PolicyAction::protect),
  }));
  EXPECT_EQ(forward_rules(text),
            (std::vector<std::string>{
                "meta nfproto ipv4 ip saddr 10.2.0.1/32 ip daddr 10.1.0.0/16 goto from_tunnel_only",
                "meta nfproto ipv4 ip saddr 10.2.0.0/16 ip daddr 10.1.0.0/16 goto from_tunnel_only",
                "meta nfproto ipv4 ip saddr 10.2.0.2/32 ip daddr { 10.1.0.0/16, 10.9.0.0/16 } "
                "goto from_tunnel_only"}));
}

TEST(KernelFirewall, ARunSplitsWhenEveryFieldOverlapsSomeMember) {
  // 3's source overlaps 1's and its destination 2's, though 3 overlaps neither on both
  // sides: the quick test splits there, which costs a rule and changes no verdict.
  const auto text = firewall_ruleset(spec_of({
      policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.1/32", PolicyAction::protect),
      policy(2, Direction::fwd, "10.3.0.0/16", "10.2.0.2/32", PolicyAction::protect),
      policy(3, Direction::fwd, "10.3.0.0/24", "10.2.0.0/31", PolicyAction::protect),
      policy(4, Direction::fwd, "10.4.0.0/16", "10.2.0.0/24", PolicyAction::protect),
  }));
  EXPECT_EQ(forward_rules(text),
            (std::vector<std::string>{
                "meta nfproto ipv4 ip saddr . ip daddr { 10.2.0.1 . 10.1.0.0/16, "
                "10.2.0.2 . 10.3.0.0/16 } goto from_tunnel_only",
                "meta nfproto ipv4 ip saddr . ip daddr { 10.2.0.0/31 . 10.3.0.0/24, "
                "10.2.0.0/24 . 10.4.0.0/16 } goto from_tunnel_only"}));
}

TEST(KernelFirewall, ADifferentVerdictOrAPortRuleBreaksARunInOrder) {
  Policy ports = policy(3, Direction::fwd, "10.1.0.0/16", "10.2.0.3/32", PolicyAction::protect);
  ports.selector.protocol = 6;
  ports.selector.local_ports = {22, 22};
  const auto text = firewall_ruleset(spec_of({
      policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.1/32", PolicyAction::protect),
      policy(2, Direction::fwd, "10.1.0.0/16", "10.2.0.2/32", PolicyAction::discard),
      ports,
      policy(4, Direction::fwd, "10.1.0.0/16", "10.2.0.4/32", PolicyAction::protect),
      policy(5, Direction::fwd, "10.1.0.0/16", "10.2.0.5/32", PolicyAction::protect),
      policy(6, Direction::fwd, "10.1.0.0/16", "10.2.0.6/32", PolicyAction::bypass),
      policy(7, Direction::fwd, "10.1.0.0/16", "10.2.0.7/32", PolicyAction::bypass),
  }));
  EXPECT_EQ(forward_rules(text),
            (std::vector<std::string>{
                "meta nfproto ipv4 ip saddr 10.2.0.1/32 ip daddr 10.1.0.0/16 goto from_tunnel_only",
                "meta nfproto ipv4 ip saddr 10.2.0.2/32 ip daddr 10.1.0.0/16 counter drop",
                "meta nfproto ipv4 ip saddr 10.2.0.3/32 ip daddr 10.1.0.0/16 meta l4proto 6 "
                "th dport 22 goto from_tunnel_only",
                "meta nfproto ipv4 ip daddr 10.1.0.0/16 ip saddr { 10.2.0.4, 10.2.0.5 } "
                "goto from_tunnel_only",
                "meta nfproto ipv4 ip daddr 10.1.0.0/16 ip saddr { 10.2.0.6, 10.2.0.7 } accept"}));
}

TEST(KernelFirewall, FamiliesAndAnySidesKeepTheirOwnRuns) {
  const auto text = firewall_ruleset(spec_of({
      policy(1, Direction::fwd, "10.1.0.0/16", "10.2.0.1/32", PolicyAction::protect),
      policy(2, Direction::fwd, "10.1.0.0/16", "10.2.0.2/32", PolicyAction::protect),
      policy(3, Direction::fwd, "fd00:1::/64", "fd00:2::1/128", PolicyAction::protect),
      policy(4, Direction::fwd, "fd00:1::/64", "fd00:2::2/128", PolicyAction::protect),
      // An "any" side is not matched, so it is not in the set either.
      policy(5, Direction::fwd, "::/0", "fd00:3::/64", PolicyAction::protect),
      policy(6, Direction::fwd, "::/0", "fd00:4::/64", PolicyAction::protect),
      policy(7, Direction::fwd, "10.1.0.0/16", "10.2.0.3/32", PolicyAction::protect),
      // Family only: no set to join.
      policy(8, Direction::fwd, "0.0.0.0/0", "0.0.0.0/0", PolicyAction::protect),
      policy(9, Direction::fwd, "0.0.0.0/0", "0.0.0.0/0", PolicyAction::protect),
  }));
  EXPECT_EQ(
      forward_rules(text),
      (std::vector<std::string>{
          "meta nfproto ipv4 ip daddr 10.1.0.0/16 ip saddr { 10.2.0.1, 10.2.0.2 } "
          "goto from_tunnel_only",
          "meta nfproto ipv6 ip6 daddr fd00:1::/64 ip6 saddr { fd00:2::1, fd00:2::2 } "
          "goto from_tunnel_only",
          "meta nfproto ipv6 ip6 saddr { fd00:3::/64, fd00:4::/64 } goto from_tunnel_only",
          "meta nfproto ipv4 ip saddr 10.2.0.3/32 ip daddr 10.1.0.0/16 goto from_tunnel_only",
          "meta nfproto ipv4 goto from_tunnel_only", "meta nfproto ipv4 goto from_tunnel_only"}));
}

TEST(KernelFirewall, FailClosedPrefixesShareASetPerFamily) {
  FirewallSpec spec = spec_of({});
  spec.fail_closed_prefixes = {prefix("10.2.0.1/32"), prefix("10.2.0.2/32"), prefix("10.2.0.0/16"),
                               prefix("fd00:2::/64"), prefix("fd00:3::/64"), prefix("0.0.0.0/0")};
  EXPECT_EQ(forward_rules(firewall_ruleset(spec)),
            (std::vector<std::string>{
                "meta nfproto ipv4 ip daddr { 10.2.0.1, 10.2.0.2 } oifname != \"espgw0\" "
                "counter drop",
                "meta nfproto ipv4 ip daddr 10.2.0.0/16 oifname != \"espgw0\" counter drop",
                "meta nfproto ipv6 ip6 daddr { fd00:2::/64, fd00:3::/64 } oifname != \"espgw0\" "
                "counter drop",
                "meta nfproto ipv4 oifname != \"espgw0\" counter drop"}));
}

// --- Differential: the shared rules decide every packet as one rule per policy did ------

// A packet as the chain sees it.
struct TestPacket {
  esp::IpAddress source, destination;
  uint8_t protocol = 17;
  uint16_t source_port = 0, destination_port = 0;
};

// Does `packet` match the rule text `rule` (the subset of nft's syntax firewall_ruleset
// writes)? Returns the verdict text after the matches, or "" when it does not match.
std::string evaluate(const std::string& rule, const TestPacket& packet) {
  std::istringstream in(rule);
  std::string word;
  const auto field_value = [&](const std::string& field) -> const esp::IpAddress& {
    return field == "saddr" ? packet.source : packet.destination;
  };
  const auto in_prefix = [](const std::string& text, const esp::IpAddress& address) {
    const auto prefix = esp::IpPrefix::parse(text);
    EXPECT_TRUE(prefix.has_value()) << text;
    return prefix && prefix->contains(address);
  };
  while (in >> word) {
    if (word == "meta") {
      std::string key, value;
      in >> key >> value;
      if (key == "nfproto" && (value == "ipv4") != (packet.source.family == 4)) return "";
      if (key == "l4proto" && std::stoi(value) != packet.protocol) return "";
    } else if (word == "th") {
      std::string key, range;
      in >> key >> range;
      const uint16_t port = key == "sport" ? packet.source_port : packet.destination_port;
      const size_t dash = range.find('-');
      const int first = std::stoi(range.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
      if (port < first || port > last) return "";
    } else if (word == "ip" || word == "ip6") {
      std::vector<std::string> fields;
      std::string field, next;
      in >> field;
      fields.push_back(field);
      in >> next;
      while (next == ".") {
        in >> word >> field;
        fields.push_back(field);
        in >> next;
      }
      if (next != "{") {
        if (!in_prefix(next, field_value(fields[0]))) return "";
        continue;
      }
      // A set: elements separated by ", ", fields by " . ", up to "}".
      bool any = false, element_matches = true;
      size_t field_index = 0;
      while (in >> word && word != "}") {
        if (word == ".") continue;
        const bool last_of_element = word.back() == ',';
        if (last_of_element) word.pop_back();
        element_matches = element_matches && in_prefix(word, field_value(fields[field_index]));
        if (++field_index == fields.size()) {
          any = any || element_matches;
          element_matches = true;
          field_index = 0;
        }
      }
      if (!any) return "";
    } else {
      std::string verdict = word;
      while (in >> word) verdict += " " + word;
      return verdict;
    }
  }
  return "end of rule without a verdict";
}

// The first verdict of `rules` for `packet`, "continue" when none matches.
std::string decide(const std::vector<std::string>& rules, const TestPacket& packet) {
  for (const auto& rule : rules) {
    const std::string verdict = evaluate(rule, packet);
    if (!verdict.empty()) return verdict;
  }
  return "continue";
}

TEST(KernelFirewall, SharedRulesDecideAsOneRulePerPolicy) {
  std::mt19937 random(23);
  const std::vector<std::string> sides4 = {"10.1.0.0/16", "10.1.5.0/24", "10.1.5.7/32",
                                           "10.2.0.0/16", "10.2.0.1/32", "10.2.0.2/32",
                                           "10.2.0.0/31", "10.3.0.1/32", "0.0.0.0/0"};
  const std::vector<std::string> sides6 = {"fd00:1::/64", "fd00:1::5/128", "fd00:2::/64",
                                           "fd00:2::1/128", "::/0"};
  const PolicyAction actions[] = {PolicyAction::protect, PolicyAction::bypass,
                                  PolicyAction::discard};
  const auto pick = [&](const std::vector<std::string>& from) {
    return from[random() % from.size()];
  };
  for (int round = 0; round < 300; ++round) {
    std::vector<Policy> policies;
    const int count = 1 + static_cast<int>(random() % 40);
    for (int i = 0; i < count; ++i) {
      const bool v4 = random() % 4 != 0;
      // Mostly protect, so that runs form.
      const PolicyAction action = random() % 3 == 0 ? actions[random() % 3] : actions[0];
      Policy p = policy(static_cast<uint32_t>(i), Direction::fwd,
                        (v4 ? pick(sides4) : pick(sides6)).c_str(),
                        (v4 ? pick(sides4) : pick(sides6)).c_str(), action);
      if (random() % 8 == 0) {
        p.selector.protocol = 17;
        p.selector.local_ports = {53, 53};
      }
      policies.push_back(p);
    }
    std::vector<std::string> one_per_policy;
    for (const auto& p : policies)
      one_per_policy.push_back(firewall_match(p) + " " +
                               (p.action == PolicyAction::protect  ? "goto from_tunnel_only"
                                : p.action == PolicyAction::bypass ? "accept"
                                                                   : "counter drop"));
    const std::vector<std::string> shared = forward_rules(firewall_ruleset(spec_of(policies)));
    for (int probe = 0; probe < 200; ++probe) {
      const bool v4 = random() % 4 != 0;
      // Addresses from the prefixes' own and neighbouring hosts.
      const auto host = [&](const std::vector<std::string>& from) {
        esp::IpAddress address = prefix(pick(from).c_str()).address;
        address.bytes[address.family == 4 ? 3 : 15] ^= static_cast<uint8_t>(random() % 4);
        return address;
      };
      TestPacket packet;
      packet.source = host(v4 ? sides4 : sides6);
      packet.destination = host(v4 ? sides4 : sides6);
      packet.protocol = random() % 2 ? 17 : 6;
      packet.source_port = static_cast<uint16_t>(random() % 2 ? 53 : 1000);
      packet.destination_port = static_cast<uint16_t>(random() % 2 ? 53 : 1000);
      ASSERT_EQ(decide(shared, packet), decide(one_per_policy, packet))
          << "round " << round << ", " << packet.source.to_string() << " -> "
          << packet.destination.to_string();
    }
  }
}

TEST(KernelFirewall, TableNamesAndInterfaceNames) {
  EXPECT_EQ(firewall_table_name("espgw0"), "espgw_espgw0");
  EXPECT_EQ(firewall_table_name("gw-1.a"), "espgw_gw_x2d1_x2ea");
  EXPECT_TRUE(firewall_interface_name_ok("espgw0"));
  EXPECT_TRUE(firewall_interface_name_ok("gw-1.a_b"));
  // Nothing that could end the quoted string or start another command.
  EXPECT_FALSE(firewall_interface_name_ok("a\"b"));
  EXPECT_FALSE(firewall_interface_name_ok("a;b"));
  EXPECT_FALSE(firewall_interface_name_ok("a b"));
  EXPECT_FALSE(firewall_interface_name_ok(""));
  EXPECT_FALSE(firewall_interface_name_ok("sixteen-chars-xx"));
  EXPECT_EQ(firewall_removal("espgw0"),
            "table inet espgw_espgw0 {}\ndelete table inet espgw_espgw0\n");
}

}  // namespace
}  // namespace espgw::xfrm
