// The rules of the kernel firewall (xfrm/kernel_firewall.h), one policy or fail-closed
// prefix at a time, and how consecutive ones share a rule: what the full table
// (firewall_ruleset) and the incremental sync (xfrm/firewall_sync.h) both build from, so
// that the two cannot disagree on a rule or on where a shared rule starts and ends.
#pragma once

#include <bitset>
#include <string>
#include <unordered_set>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/policy.h"

namespace espgw::xfrm {

// One policy's (or fail-closed prefix's) rule on its own, and how it may join its
// neighbours: rules that match addresses only and whose remaining text (`head`, naming the
// family and the address fields, and `tail`, the rest of the rule) is the same can share
// one rule that matches the union of their addresses through an anonymous set.
struct FirewallRule {
  std::string single;                    // the rule on its own
  bool joinable = false;                 // addresses only
  std::string family;                    // "meta nfproto ipv4"
  std::vector<std::string> fields;       // "ip saddr", "ip daddr": those it matches
  std::string head;                      // family and fields, what a run must share
  std::string tail;                      // "goto from_tunnel_only"
  std::vector<esp::IpPrefix> addresses;  // one per field
};

FirewallRule firewall_policy_rule(const Policy& policy);
FirewallRule firewall_fail_closed_rule(const esp::IpPrefix& prefix, const std::string& tun_name);

// The one rule of a run of `members` (which share head and tail): members[0].single when
// the run has one member, else the shared rule. When every member has the same prefix in
// one of two fields, that field is matched on its own and the set holds the other only: a
// set of one field is a hash or a tree of ranges, looked up in one step or a logarithmic
// walk, where a set of concatenated ranges costs a lookup time that grows with its size.
std::string firewall_run_rule(const std::vector<const FirewallRule*>& members);

// The prefixes of one field of a run, asked whether a prefix overlaps any of them (one
// contains the other) in a few hash lookups rather than one comparison per member.
class PrefixOverlapSet {
 public:
  bool overlaps(const esp::IpPrefix& prefix) const;
  void insert(const esp::IpPrefix& prefix);

 private:
  // The family, the length and the address's first `length` bits.
  static std::string key(const esp::IpPrefix& prefix, unsigned length);
  std::unordered_set<std::string> members_;
  std::unordered_set<std::string> covered_;
  std::bitset<129> lengths_;
};

// Decides, rule after rule in chain order, where runs start. A run starts at a rule and
// takes each following joinable rule with the same head and tail, until one that may
// overlap a member: a set of concatenated ranges refuses overlapping elements, so a rule
// whose every field overlaps that field of some member (not necessarily the same member: a
// cheap test, which at worst splits a run that could have stayed whole, and never changes
// a verdict) starts a new run instead. The first matching rule decides, so sharing changes
// no verdict: a packet that matches the shared rule matched one of its rules, all with the
// same tail, and a packet that matches none goes on to the next rule as before.
class FirewallRunBuilder {
 public:
  // True when `rule` starts a new run (always for the first rule); either way it is in the
  // current run afterwards.
  bool next(const FirewallRule& rule);

 private:
  const FirewallRule* first_ = nullptr;
  std::vector<PrefixOverlapSet> fields_;
};

}  // namespace espgw::xfrm
