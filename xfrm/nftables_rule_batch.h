// One nftables transaction of rule inserts and deletes in one `inet` table, sent to the
// kernel as netlink messages built with libnftnl, for the firewall sync's deltas
// (xfrm/firewall_sync.h).
//
// libnftables (the text path, xfrm/kernel_firewall.h) reads every rule of the ruleset into
// a parsed copy before a command that names a position (`insert rule ... position H`), so
// with thousands of policies each such delta cost time and memory that grew with the
// table. The kernel itself takes the position as an attribute of the new rule
// (NFTA_RULE_POSITION: the new rule goes before that handle), so a rule built here costs
// the same at any table size and no copy of the ruleset exists in espgw.
//
// Only the rule of one policy on its own is built here (firewall_match and the policy's
// verdict): its expressions are exactly those nft 1.0.6 generates for that rule's text,
// so the kernel holds, and `nft list` prints, the same rule either way
// (tests/xfrm/nftables_rule_batch_netns_test.cpp compares both). Shared rules (anonymous
// sets) and fail-closed rules stay text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xfrm/netlink.h"
#include "xfrm/policy.h"

namespace espgw::xfrm {

class NftablesRuleBatch {
 public:
  // `table_name` as firewall_table_name gives it; the family is inet.
  explicit NftablesRuleBatch(std::string table_name);

  // Whether `policy`'s rule on its own (firewall_policy_rule(policy).single) is one this
  // builds. False for ports without a protocol and for a prefix with bits set past its
  // length: shapes whose text nft would read in its own way.
  static bool builds(const Policy& policy);

  // Queues `policy`'s rule in `chain`: before the rule of handle `before`, or appended at
  // the chain's end when `before` is 0. builds(policy) must be true.
  void insert(const std::string& chain, const Policy& policy, uint64_t before);
  // Queues deleting the rule of handle `handle` in `chain`.
  void remove(const std::string& chain, uint64_t handle);
  // Queues what `other` queued, after what this one did.
  void append(const NftablesRuleBatch& other);
  bool empty() const { return operations_.empty(); }

  // Sends what is queued as one transaction (all of it or nothing) and reads the kernel's
  // answer to every message. New rules are added in the order they were queued.
  Result commit(std::string_view what) const;

 private:
  struct Operation {
    std::string chain;
    Policy policy;        // insert
    uint64_t handle = 0;  // insert: the position (0: append); remove: the rule
    bool insert = false;
  };
  std::string table_name_;
  std::vector<Operation> operations_;
};

}  // namespace espgw::xfrm
