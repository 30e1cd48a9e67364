#include "xfrm/kernel_firewall.h"

#include <nftables/libnftables.h>

#include <bitset>
#include <cstdio>
#include <stdexcept>
#include <unordered_set>

namespace espgw::xfrm {
namespace {

bool name_character_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string port_range_text(const PortRange& range) {
  if (range.first == range.last) return std::to_string(range.first);
  return std::to_string(range.first) + "-" + std::to_string(range.last);
}

// Chains a protect rule jumps to: what came through (or leaves through) the TUN device is
// accepted, the rest is counted and dropped.
constexpr std::string_view kFromTunnelOnly = "from_tunnel_only";
constexpr std::string_view kToTunnelOnly = "to_tunnel_only";

std::string verdict(const Policy& policy) {
  switch (policy.action) {
    case PolicyAction::protect:
      return "goto " +
             std::string(policy.direction == Direction::out ? kToTunnelOnly : kFromTunnelOnly);
    case PolicyAction::bypass:
      return "accept";
    case PolicyAction::discard:
      return "counter drop";
  }
  return "counter drop";
}

// One policy's (or fail-closed prefix's) rule on its own, and how it may join its
// neighbours: rules that match addresses only and whose remaining text (`head`, naming the
// family and the address fields, and `tail`, the rest of the rule) is the same can share
// one rule that matches the union of their addresses through an anonymous set.
struct RuleText {
  std::string single;                    // the rule on its own
  bool joinable = false;                 // addresses only
  std::string family;                    // "meta nfproto ipv4"
  std::vector<std::string> fields;       // "ip saddr", "ip daddr": those it matches
  std::string head;                      // family and fields, what a run must share
  std::string tail;                      // "goto from_tunnel_only"
  std::vector<esp::IpPrefix> addresses;  // one per field
};

// A host prefix as a bare address: a set of addresses only is a hash the kernel looks up
// in one step, where prefixes make it a set of ranges.
std::string set_element(const esp::IpPrefix& prefix) {
  const unsigned host_length = prefix.address.family == 4 ? 32 : 128;
  return prefix.length == host_length ? prefix.address.to_string() : prefix.to_string();
}

// The shared rule of `rules`, which have one head and tail. When every member has the same
// prefix in one of two fields, that field is matched on its own and the set holds the
// other only: a set of one field is a hash or a tree of ranges, looked up in one step or
// a logarithmic walk, where a set of concatenated ranges costs a lookup time that grows
// with its size.
std::string shared_rule(const RuleText* begin, const RuleText* end) {
  const RuleText& first = *begin;
  size_t common = first.fields.size();  // none
  for (size_t field = 0; field < first.fields.size() && first.fields.size() == 2; ++field) {
    bool same = true;
    for (const RuleText* member = begin; member != end && same; ++member)
      same = member->addresses[field].to_string() == first.addresses[field].to_string();
    if (same) {
      common = field;
      break;
    }
  }
  std::string text = first.family;
  if (common < first.fields.size()) {
    const size_t varying = 1 - common;
    text += " " + first.fields[common] + " " + first.addresses[common].to_string() + " " +
            first.fields[varying] + " { ";
    for (const RuleText* member = begin; member != end; ++member)
      text += (member == begin ? "" : ", ") + set_element(member->addresses[varying]);
  } else {
    text += " " + first.fields[0];
    for (size_t field = 1; field < first.fields.size(); ++field)
      text += " . " + first.fields[field];
    text += " { ";
    for (const RuleText* member = begin; member != end; ++member) {
      text += member == begin ? "" : ", ";
      for (size_t field = 0; field < member->addresses.size(); ++field)
        text += (field == 0 ? "" : " . ") + set_element(member->addresses[field]);
    }
  }
  return text + " } " + first.tail;
}

// The prefixes of one field of a shared rule, asked whether a prefix overlaps any of them
// (one contains the other) in a few hash lookups rather than one comparison per member.
class PrefixOverlapSet {
 public:
  bool overlaps(const esp::IpPrefix& prefix) const {
    // One of them inside `prefix` (or equal to it)?
    if (covered_.count(key(prefix, prefix.length)) != 0) return true;
    // `prefix` inside one of them: look for its own prefixes of the lengths there are.
    for (unsigned length = 0; length < prefix.length; ++length)
      if (lengths_[length] && members_.count(key(prefix, length)) != 0) return true;
    return false;
  }
  void insert(const esp::IpPrefix& prefix) {
    members_.insert(key(prefix, prefix.length));
    lengths_[prefix.length] = true;
    // Every prefix that contains it; shorter ones are there already once one is.
    for (int length = prefix.length; length >= 0; --length)
      if (!covered_.insert(key(prefix, static_cast<unsigned>(length))).second) break;
  }

 private:
  // The family, the length and the address's first `length` bits.
  static std::string key(const esp::IpPrefix& prefix, unsigned length) {
    std::string text(1, static_cast<char>(prefix.address.family));
    text += static_cast<char>(length);
    const unsigned bytes = (length + 7) / 8;
    text.append(reinterpret_cast<const char*>(prefix.address.bytes.data()), bytes);
    if (length % 8 != 0) text.back() &= static_cast<char>(0xFF << (8 - length % 8));
    return text;
  }
  std::unordered_set<std::string> members_;
  std::unordered_set<std::string> covered_;
  std::bitset<129> lengths_;
};

// Writes `rules` in order, joining each run of consecutive joinable rules with the same
// head and tail into one. The first matching rule decides, so this changes no verdict: a
// packet that matches the joined rule matched one of its rules, all of which have the
// same tail, and a packet that matches none goes on to the next rule as before. A set of
// concatenated ranges refuses overlapping elements, so a rule that may overlap one already
// in the run starts a new run instead: one whose every field overlaps that field of some
// member (not necessarily the same member: a cheap test, which at worst splits a run that
// could have stayed whole, and never changes a verdict).
void write_rules(std::string& text, const std::vector<RuleText>& rules) {
  size_t first = 0;
  while (first < rules.size()) {
    size_t end = first + 1;
    if (rules[first].joinable) {
      std::vector<PrefixOverlapSet> fields(rules[first].addresses.size());
      for (size_t field = 0; field < fields.size(); ++field)
        fields[field].insert(rules[first].addresses[field]);
      while (end < rules.size() && rules[end].joinable && rules[end].head == rules[first].head &&
             rules[end].tail == rules[first].tail) {
        bool every_field_overlaps = true;
        for (size_t field = 0; field < fields.size() && every_field_overlaps; ++field)
          every_field_overlaps = fields[field].overlaps(rules[end].addresses[field]);
        if (every_field_overlaps) break;
        for (size_t field = 0; field < fields.size(); ++field)
          fields[field].insert(rules[end].addresses[field]);
        ++end;
      }
    }
    if (end - first == 1) {
      text += "    " + rules[first].single + "\n";
    } else {
      text += "    " + shared_rule(&rules[first], &rules[first] + (end - first)) + "\n";
    }
    first = end;
  }
}

RuleText policy_rule(const Policy& policy) {
  RuleText rule;
  rule.tail = verdict(policy);
  rule.single = firewall_match(policy) + " " + rule.tail;
  const Selector& selector = policy.selector;
  if (selector.protocol != 0 || !selector.local_ports.is_any() || !selector.remote_ports.is_any())
    return rule;
  const bool outbound = policy.direction == Direction::out;
  const esp::IpPrefix& source = outbound ? selector.local : selector.remote;
  const esp::IpPrefix& destination = outbound ? selector.remote : selector.local;
  const bool v4 = selector.local.address.family == 4;
  const std::string ip = v4 ? "ip" : "ip6";
  // Only the fields the single rule matches: an "any" side stays out of the set.
  rule.family = std::string("meta nfproto ") + (v4 ? "ipv4" : "ipv6");
  if (source.length != 0) {
    rule.fields.push_back(ip + " saddr");
    rule.addresses.push_back(source);
  }
  if (destination.length != 0) {
    rule.fields.push_back(ip + " daddr");
    rule.addresses.push_back(destination);
  }
  if (rule.fields.empty()) return rule;  // family only: nothing to put in a set
  rule.joinable = true;
  rule.head = rule.family;
  for (const auto& field : rule.fields) rule.head += " " + field;
  return rule;
}

void add_rules(std::string& text, const std::vector<Policy>& policies, Direction direction) {
  std::vector<RuleText> rules;
  for (const auto& policy : policies)
    if (policy.direction == direction) rules.push_back(policy_rule(policy));
  write_rules(text, rules);
}

void add_fail_closed(std::string& text, const FirewallSpec& spec) {
  std::vector<RuleText> rules;
  for (const auto& prefix : spec.fail_closed_prefixes) {
    const bool v4 = prefix.address.family == 4;
    RuleText rule;
    rule.tail = "oifname != \"" + spec.tun_name + "\" counter drop";
    rule.family = std::string("meta nfproto ") + (v4 ? "ipv4" : "ipv6");
    rule.single = rule.family;
    if (prefix.length != 0) {
      rule.fields = {v4 ? "ip daddr" : "ip6 daddr"};
      rule.head = rule.family + " " + rule.fields[0];
      rule.single = rule.head + " " + prefix.to_string();
      rule.joinable = true;
      rule.addresses = {prefix};
    }
    rule.single += " " + rule.tail;
    rules.push_back(std::move(rule));
  }
  write_rules(text, rules);
}

}  // namespace

bool firewall_interface_name_ok(std::string_view tun_name) {
  if (tun_name.empty() || tun_name.size() > 15) return false;
  for (const char c : tun_name)
    if (!name_character_ok(c) && c != '-' && c != '.') return false;
  return true;
}

std::string firewall_table_name(std::string_view tun_name) {
  std::string name = "espgw_";
  for (const char c : tun_name) {
    if (name_character_ok(c)) {
      name += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "_x%02x",
                    static_cast<unsigned>(static_cast<uint8_t>(c)));
      name += escaped;
    }
  }
  return name;
}

std::string firewall_match(const Policy& policy) {
  const Selector& selector = policy.selector;
  const bool outbound = policy.direction == Direction::out;
  // Selectors name local and remote; a packet of `in` or `fwd` comes from the remote side.
  const esp::IpPrefix& source = outbound ? selector.local : selector.remote;
  const esp::IpPrefix& destination = outbound ? selector.remote : selector.local;
  const PortRange& source_ports = outbound ? selector.local_ports : selector.remote_ports;
  const PortRange& destination_ports = outbound ? selector.remote_ports : selector.local_ports;
  const bool v4 = selector.local.address.family == 4;
  const char* ip = v4 ? "ip" : "ip6";
  // The family is matched even when both prefixes are "any": an IPv4 selector never
  // matches an IPv6 packet (Selector::matches).
  std::string match = std::string("meta nfproto ") + (v4 ? "ipv4" : "ipv6");
  if (source.length != 0) match += std::string(" ") + ip + " saddr " + source.to_string();
  if (destination.length != 0) match += std::string(" ") + ip + " daddr " + destination.to_string();
  if (selector.protocol != 0) match += " meta l4proto " + std::to_string(selector.protocol);
  // Like the SPD, a port range never matches a packet whose ports are unknown: nft's
  // transport header match does not match a non-first fragment.
  if (!source_ports.is_any()) match += " th sport " + port_range_text(source_ports);
  if (!destination_ports.is_any()) match += " th dport " + port_range_text(destination_ports);
  return match;
}

std::string firewall_ruleset(const FirewallSpec& spec) {
  const std::string table = "table inet " + firewall_table_name(spec.tun_name);
  const std::string tun = "\"" + spec.tun_name + "\"";
  // Declaring the table first makes the delete succeed whether or not it existed; the
  // three commands are one transaction, so no packet sees the table empty.
  std::string text = table + " {}\ndelete " + table + "\n" + table + " {\n";
  text += "  chain " + std::string(kFromTunnelOnly) + " {\n    iifname " + tun +
          " accept\n    counter drop\n  }\n";
  text += "  chain " + std::string(kToTunnelOnly) + " {\n    oifname " + tun +
          " accept\n    counter drop\n  }\n";
  // Before the usual filter chains (priority 0), so that an accept elsewhere does not
  // matter: every base chain of every table sees the packet.
  text += "  chain input {\n    type filter hook input priority filter - 10; policy accept;\n";
  add_rules(text, spec.policies, Direction::in);
  text += "  }\n";
  text += "  chain forward {\n    type filter hook forward priority filter - 10; policy accept;\n";
  add_rules(text, spec.policies, Direction::fwd);
  add_rules(text, spec.policies, Direction::out);
  add_fail_closed(text, spec);
  text += "  }\n";
  text += "  chain output {\n    type filter hook output priority filter - 10; policy accept;\n";
  add_rules(text, spec.policies, Direction::out);
  add_fail_closed(text, spec);
  text += "  }\n}\n";
  return text;
}

std::string firewall_removal(std::string_view tun_name) {
  const std::string table = "table inet " + firewall_table_name(tun_name);
  return table + " {}\ndelete " + table + "\n";
}

void KernelFirewall::ContextFree::operator()(nft_ctx* context) const {
  nft_ctx_free(context);
}

KernelFirewall::KernelFirewall() : context_(nft_ctx_new(NFT_CTX_DEFAULT)) {
  if (!context_) throw std::runtime_error("nftables: no libnftables context");
  // Errors (and any output) into buffers, for our log, not onto stderr.
  nft_ctx_buffer_output(context_.get());
  nft_ctx_buffer_error(context_.get());
}

KernelFirewall::~KernelFirewall() = default;

Result KernelFirewall::run(const std::string& commands, std::string_view what) {
  if (nft_run_cmd_from_buffer(context_.get(), commands.c_str()) == 0) return {};
  Result result;
  result.ok = false;
  result.error = EIO;  // nft reports text, not an errno
  std::string detail = nft_ctx_get_error_buffer(context_.get());
  while (!detail.empty() && (detail.back() == '\n' || detail.back() == ' ')) detail.pop_back();
  result.message = "nftables: " + std::string(what) + " failed" +
                   (detail.empty() ? std::string() : ": " + detail);
  return result;
}

}  // namespace espgw::xfrm
