// Keeps the kernel firewall's table (xfrm/kernel_firewall.h) in line with the policies and
// fail-closed prefixes by changing only the rules that a change touches.
//
// The model holds every policy and fail-closed prefix in chain order, the runs that share a
// rule (FirewallRunBuilder, exactly as the full table groups them) and each rule's kernel
// handle in each chain it is in. A sync re-decides the runs from the run before the first
// change up to the first unchanged run start after the last one (greedy run-building is
// memoryless at a run start, so everything after that point is as before), then sends one
// nft transaction: new rules inserted before the next rule that stays (or appended at the
// chain's end), then removed ones deleted by handle; a changed rule is deleted and its new
// text inserted where it stood. A rule of one policy costs one command whatever the
// table's size; a shared rule (an anonymous set, which the kernel cannot change in place)
// is sent again whole when a member joins or leaves it. When every new rule of a sync is
// one policy's rule on its own, the transaction goes as netlink messages built with
// libnftnl (xfrm/nftables_rule_batch.h), with each insert's position as an attribute: the
// same cost at any table size. Otherwise it goes as text through libnftables, which reads
// every rule of the ruleset before an insert that names a position (O(n), docs/scaling.md).
//
// The full table (firewall_table) is written instead: at the first sync, after a delta the
// kernel refused, after an answer that did not give the handles expected, and when the
// kernel's nftables generation moved since espgw's last commit (another process changed
// some table of the namespace: espgw's own may be among them). Each is counted with its
// reason. docs/security_fail_closed.md, "Inbound policy enforcement".
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/firewall_rules.h"
#include "xfrm/kernel_firewall.h"
#include "xfrm/nftables_events.h"
#include "xfrm/policy.h"

namespace espgw::xfrm {

// One change to what the table must say, queued by whoever changes policies and applied by
// the thread that syncs.
struct FirewallChange {
  enum class Kind : uint8_t { add_policy, remove_policy, add_prefix, remove_prefix };
  Kind kind = Kind::add_policy;
  Policy policy;         // add_policy, remove_policy
  esp::IpPrefix prefix;  // add_prefix, remove_prefix
};

struct FirewallSyncStats {
  uint64_t deltas = 0;          // transactions of changed rules only
  uint64_t netlink_deltas = 0;  // of which sent as libnftnl's messages, not as text
  uint64_t rebuilds = 0;        // whole-table transactions, the first one included
  uint64_t rules_added = 0;     // by deltas
  uint64_t rules_replaced = 0;
  uint64_t rules_deleted = 0;
  std::string last_rebuild_reason;
};

// The kernel's nftables ruleset generation (bumped by every committed transaction in the
// network namespace), or nullopt if it cannot be read.
std::optional<uint32_t> nftables_generation();

// Not thread-safe: one thread applies changes and syncs.
class FirewallSync {
 public:
  FirewallSync(KernelFirewall& kernel, std::string tun_name);

  // The model only; the kernel learns at the next sync. Policies must come in the order the
  // SPD was given them (it breaks ties of priority and specificity by that order).
  void apply(const FirewallChange& change);

  // True when a sync has something to do (changes, or a rebuild owed).
  bool pending() const;
  // Sends what changed since the last sync (nothing when nothing did), or the whole table
  // when it must (see above). On failure the table the kernel had stays whole (nft
  // transactions are atomic) and the next sync writes the whole table again.
  Result sync();

  // Takes `generation` as that of espgw's own last commit (tests: a change behind the
  // sync's back that only the kernel refusing a delta reveals).
  void assume_generation(uint32_t generation) { generation_ = generation; }
  // Makes the next sync write the whole table.
  void rebuild_next(std::string reason);
  const FirewallSyncStats& stats() const { return stats_; }
  // The model as firewall_ruleset takes it.
  FirewallSpec spec() const;

 private:
  // A policy or prefix in chain order; the first member of a run carries the run's kernel
  // rule. Its own rule (FirewallRule) is built again when a sync needs it rather than kept:
  // with thousands of policies the texts would be most of the model's memory.
  struct Member {
    Policy policy;                     // policies' parts
    esp::IpPrefix prefix;              // the fail-closed part
    bool run_start = false;            // as the kernel has it
    std::string run_text;              // run_start: the rule the kernel has; empty when it
                                       // is this member's rule on its own
    std::array<uint64_t, 2> handle{};  // run_start: the rule's handle in each chain
  };
  using Members = std::map<std::string, Member>;
  struct Removed {
    std::string key;
    std::array<uint64_t, 2> handle{};
  };
  struct Part {
    Members members;
    std::set<std::string> dirty;   // keys added or removed since the last sync
    std::vector<Removed> removed;  // run starts the kernel has and the model no longer
  };
  enum class Action : uint8_t { keep, replace, insert };
  struct NewRun {
    Member* head = nullptr;
    std::string text;
    Action action = Action::keep;
    bool single = false;  // one member: its rule on its own
  };
  // The runs re-decided in one part at one sync: [start, stop) of its members.
  struct Region {
    bool active = false;
    bool from_beginning = false;
    std::vector<NewRun> runs;
    std::vector<std::array<uint64_t, 2>> deleted;
    Member* stop = nullptr;  // the first unchanged run start after it, if any
  };
  struct Placement {
    size_t part;
    size_t slot;  // which of the member's handles
  };

  FirewallRule rule_of(size_t part, const Member& member) const;
  size_t index_of(const Part& part) const;
  void insert_member(size_t part, std::string key, Member member);
  void erase_member(size_t part, const std::string& key);
  Region redecide(Part& part);
  // The handle of the first rule at or after the start of `placements[index]`'s part that
  // this sync keeps, looking on through the chain's later parts; 0 for none (append).
  uint64_t anchor_from(const std::vector<Placement>& placements, size_t index,
                       const std::vector<Region>& regions) const;
  Result rebuild();
  Result delta();
  bool generation_moved();

  KernelFirewall& kernel_;
  std::string tun_name_;
  std::string table_name_;
  std::string table_;  // "inet " and its name
  NftablesEvents events_;
  std::array<Part, 4> parts_;  // in, fwd, out, fail-closed
  std::unordered_map<uint32_t, std::string> policy_keys_;
  uint64_t sequence_ = 0;
  bool rebuild_owed_ = true;
  std::string rebuild_reason_ = "first sync";
  std::optional<uint32_t> generation_;
  FirewallSyncStats stats_;
};

}  // namespace espgw::xfrm
