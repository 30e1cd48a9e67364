// The kernel routes the policies need, with use counts: per remote prefix of an out
// protect policy, the route through the TUN device and its fail-closed route; per out
// bypass policy, its bypass rule (xfrm/fail_closed_routes.h). A route goes when the last
// policy that needs it goes; fail-closed routes and bypass rules outlive espgw.
//
// Not thread-safe: the gateway calls it under its control lock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/fail_closed_routes.h"
#include "xfrm/netlink.h"
#include "xfrm/policy.h"

namespace espgw::daemon {

class RouteTable {
 public:
  RouteTable(xfrm::RtNetlink& netlink, std::string tun_name);

  // espgw's routing table and rule priorities (derived from the TUN name).
  const xfrm::RoutingIds& ids() const { return routing_; }
  // The rules to espgw's routing table, and the fail-closed routes and bypass rules an
  // earlier run left there, adopted. Throws std::runtime_error ("fail closed: ...").
  void adopt_fail_closed_routes();
  // Removes the adopted routes no policy needs; only done where nothing else will claim
  // them (no control socket: charon replays its policies after a restart).
  void remove_unused_fail_closed_routes();

  // A policy was installed or removed: the routes it needs (out protect: the TUN route
  // and the fail-closed route of its remote prefix; out bypass: its bypass rule).
  void add_policy(const xfrm::Policy& policy);
  void drop_policy(const xfrm::Policy& policy);
  // While set (charon's policies cleared for a new charon), fail-closed routes no policy
  // needs any more stay in the kernel.
  void keep_fail_closed_routes(bool keep) { keep_fail_closed_routes_ = keep; }
  // Fail-closed routes the kernel refused (startup stops on any).
  unsigned refused_fail_closed_routes() const { return fail_closed_route_errors_; }
  // The prefixes of every installed fail-closed route (for the firewall).
  std::vector<esp::IpPrefix> fail_closed_prefixes() const {
    return fail_closed_routes_.fail_closed_prefixes();
  }
  // Those that came (true) or went (false) since the last call, in order.
  std::vector<std::pair<esp::IpPrefix, bool>> take_fail_closed_prefix_changes() {
    return fail_closed_routes_.take_prefix_changes();
  }

  // Removes the routes through the TUN device (the gateway goes down); the fail-closed
  // routes and bypass rules stay.
  void remove_tun_routes();

 private:
  struct RouteUse {
    esp::IpPrefix prefix;
    unsigned policies = 0;  // out protect policies whose remote side it is
  };
  // A fail-closed route (`selector.remote`) or a bypass rule, kept by use counts.
  void add_fail_closed_route(xfrm::FailClosedRouteSet::Kind kind, const xfrm::Selector& selector);
  void drop_fail_closed_route(xfrm::FailClosedRouteSet::Kind kind, const xfrm::Selector& selector);
  xfrm::Result change_fail_closed_route(bool add, xfrm::FailClosedRouteSet::Kind kind,
                                        const xfrm::Selector& selector);

  xfrm::RtNetlink& netlink_;
  const std::string tun_name_;
  // espgw's routing table (all its routes) and rule priorities.
  const xfrm::RoutingIds routing_;
  std::map<std::string, RouteUse> routes_;  // routes we added, by prefix
  // Its fail-closed routes and bypass rules.
  xfrm::FailClosedRouteSet fail_closed_routes_;
  bool keep_fail_closed_routes_ = false;
  unsigned fail_closed_route_errors_ = 0;
};

}  // namespace espgw::daemon
