#include "xfrm/firewall_rules.h"

#include "xfrm/kernel_firewall.h"

namespace espgw::xfrm {
namespace {

// Chains a protect rule jumps to: what came through (or leaves through) the TUN device is
// accepted, the rest is counted and dropped (firewall_ruleset declares them).
std::string verdict(const Policy& policy) {
  switch (policy.action) {
    case PolicyAction::protect:
      return policy.direction == Direction::out ? "goto to_tunnel_only" : "goto from_tunnel_only";
    case PolicyAction::bypass:
      return "accept";
    case PolicyAction::discard:
      return "counter drop";
  }
  return "counter drop";
}

// A host prefix as a bare address: a set of addresses only is a hash the kernel looks up
// in one step, where prefixes make it a set of ranges.
std::string set_element(const esp::IpPrefix& prefix) {
  const unsigned host_length = prefix.address.family == 4 ? 32 : 128;
  return prefix.length == host_length ? prefix.address.to_string() : prefix.to_string();
}

}  // namespace

FirewallRule firewall_policy_rule(const Policy& policy) {
  FirewallRule rule;
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

FirewallRule firewall_fail_closed_rule(const esp::IpPrefix& prefix, const std::string& tun_name) {
  const bool v4 = prefix.address.family == 4;
  FirewallRule rule;
  rule.tail = "oifname != \"" + tun_name + "\" counter drop";
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
  return rule;
}

std::string firewall_run_rule(const std::vector<const FirewallRule*>& members) {
  const FirewallRule& first = *members.front();
  if (members.size() == 1) return first.single;
  size_t common = first.fields.size();  // none
  for (size_t field = 0; field < first.fields.size() && first.fields.size() == 2; ++field) {
    bool same = true;
    for (size_t member = 0; member < members.size() && same; ++member)
      same = members[member]->addresses[field].to_string() == first.addresses[field].to_string();
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
    for (size_t member = 0; member < members.size(); ++member)
      text += (member == 0 ? "" : ", ") + set_element(members[member]->addresses[varying]);
  } else {
    text += " " + first.fields[0];
    for (size_t field = 1; field < first.fields.size(); ++field)
      text += " . " + first.fields[field];
    text += " { ";
    for (size_t member = 0; member < members.size(); ++member) {
      text += member == 0 ? "" : ", ";
      for (size_t field = 0; field < members[member]->addresses.size(); ++field)
        text += (field == 0 ? "" : " . ") + set_element(members[member]->addresses[field]);
    }
  }
  return text + " } " + first.tail;
}

bool PrefixOverlapSet::overlaps(const esp::IpPrefix& prefix) const {
  // One of them inside `prefix` (or equal to it)?
  if (covered_.count(key(prefix, prefix.length)) != 0) return true;
  // `prefix` inside one of them: look for its own prefixes of the lengths there are.
  for (unsigned length = 0; length < prefix.length; ++length)
    if (lengths_[length] && members_.count(key(prefix, length)) != 0) return true;
  return false;
}

void PrefixOverlapSet::insert(const esp::IpPrefix& prefix) {
  members_.insert(key(prefix, prefix.length));
  lengths_[prefix.length] = true;
  // Every prefix that contains it; shorter ones are there already once one is.
  for (int length = prefix.length; length >= 0; --length)
    if (!covered_.insert(key(prefix, static_cast<unsigned>(length))).second) break;
}

std::string PrefixOverlapSet::key(const esp::IpPrefix& prefix, unsigned length) {
  std::string text(1, static_cast<char>(prefix.address.family));
  text += static_cast<char>(length);
  const unsigned bytes = (length + 7) / 8;
  text.append(reinterpret_cast<const char*>(prefix.address.bytes.data()), bytes);
  if (length % 8 != 0) text.back() &= static_cast<char>(0xFF << (8 - length % 8));
  return text;
}

bool FirewallRunBuilder::next(const FirewallRule& rule) {
  if (first_ && first_->joinable && rule.joinable && rule.head == first_->head &&
      rule.tail == first_->tail) {
    bool every_field_overlaps = true;
    for (size_t field = 0; field < fields_.size() && every_field_overlaps; ++field)
      every_field_overlaps = fields_[field].overlaps(rule.addresses[field]);
    if (!every_field_overlaps) {
      for (size_t field = 0; field < fields_.size(); ++field)
        fields_[field].insert(rule.addresses[field]);
      return false;
    }
  }
  first_ = &rule;
  fields_.assign(rule.joinable ? rule.addresses.size() : 0, PrefixOverlapSet{});
  for (size_t field = 0; field < fields_.size(); ++field)
    fields_[field].insert(rule.addresses[field]);
  return true;
}

}  // namespace espgw::xfrm
