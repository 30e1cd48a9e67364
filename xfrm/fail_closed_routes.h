// Fail-closed routing: where espgw's routes live and what keeps a protected destination
// unroutable while espgw is not running.
//
// espgw's routes go into a routing table of the instance's own (route_table_for, keyed by
// the TUN name, so that instances in one namespace keep apart), which a rule per family
// consults before the main table. For the remote prefix of each out protect policy the
// table holds two routes:
//   <prefix> dev <tun>                   while espgw runs; goes with the TUN device
//   prohibit <prefix> metric 4096        the fail-closed route; outlives the TUN device
// Each out bypass policy is a rule just before the table's ("from LOCAL to REMOTE
// [ipproto P] [sport] [dport] lookup main"): bypass traffic is routed as it would be
// without espgw, whatever espgw's table says, also while espgw is down.
// None of these is removed on SIGTERM or by a crash: only when no policy needs them any
// more, or by `espgw --release`. docs/security_fail_closed.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/netlink.h"
#include "xfrm/selector.h"

namespace espgw::xfrm {

// Behind the TUN device's route (metric 0 for IPv4, the kernel's 1024 for IPv6).
constexpr uint32_t kFailClosedRouteMetric = 4096;

// The instance's routing table and rule priorities, derived from the TUN name (FNV-1a):
// the table in 0x45000000-0x45FFFFFF, far from the tables people number by hand and from
// 253-255; the table's rule at an odd priority in 31001-31799 (before the main table's
// 32766, after the local table's 0, so this host's own addresses stay local), the bypass
// rules one before it. Instances whose names meet on one priority are refused at start.
struct RoutingIds {
  uint32_t table = 0;
  uint32_t table_rule_priority = 0;
  uint32_t bypass_rule_priority = 0;
};
RoutingIds routing_ids_for(std::string_view tun_name);

// Bookkeeping only (no kernel): which fail-closed routes and bypass rules the kernel
// holds, and how many policies need each. One found at start-up from an earlier run is
// adopted with no user; a policy that needs it later takes it over.
class FailClosedRouteSet {
 public:
  enum class Kind : uint8_t { fail_closed, bypass };
  // fail_closed: selector.remote is the route's prefix (the rest is "any");
  // bypass: the whole selector, as the out bypass policy has it.
  struct Entry {
    Kind kind = Kind::fail_closed;
    Selector selector;
  };

  // A policy needs it. True: the kernel does not have it yet, add it.
  bool use(Kind kind, const Selector& selector);
  // A policy no longer needs it. True: no policy does, remove it from the kernel (it is
  // forgotten here). With `keep_unused` an unused one stays (installed, no user).
  bool release(Kind kind, const Selector& selector, bool keep_unused);
  // Found in the kernel (an earlier run's): installed, with no user yet.
  void adopt(Kind kind, const Selector& selector);
  // Installed, needed by no policy.
  std::vector<Entry> unused() const;
  // Removes the entry whatever its users (after it was removed from the kernel).
  void forget(Kind kind, const Selector& selector);
  // The prefixes of every installed fail-closed route.
  std::vector<esp::IpPrefix> fail_closed_prefixes() const;
  size_t users(Kind kind, const Selector& selector) const;
  // Fail-closed prefixes that came (true) or went (false) since the last call, in order:
  // what the firewall's incremental sync (xfrm/firewall_sync.h) applies.
  std::vector<std::pair<esp::IpPrefix, bool>> take_prefix_changes();

 private:
  struct Slot {
    Entry entry;
    size_t users = 0;
  };
  static std::string key(Kind kind, const Selector& selector);
  void note(Kind kind, const Selector& selector, bool added);
  std::map<std::string, Slot> slots_;
  std::vector<std::pair<esp::IpPrefix, bool>> prefix_changes_;
};

// The selector of a fail-closed route of `prefix`.
Selector fail_closed_selector(const esp::IpPrefix& prefix);
// The rule of an out bypass policy's selector (its packets go local -> remote).
RtNetlink::Rule bypass_rule(const Selector& selector, uint32_t priority);
// Back from a rule of the kernel's (adopting an earlier run's).
Selector bypass_selector(const RtNetlink::Rule& rule);

// Adds the rules (IPv4 and IPv6) that consult the table; one that exists is fine. Fails
// when another espgw's table rule sits on the same priority (TUN names that meet).
Result install_routing_rules(RtNetlink& netlink, const RoutingIds& ids);
// What `espgw --release` does to routing: removes the table's rules, the bypass rules and
// every espgw route of the table, so that the protected destinations follow the main
// table again. Returns the first failure (after trying everything); `removed` counts the
// routes and bypass rules removed.
Result release_routing(RtNetlink& netlink, const RoutingIds& ids, size_t& removed);

}  // namespace espgw::xfrm
