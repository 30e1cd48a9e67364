#include "daemon/route_table.h"

#include <cerrno>
#include <optional>
#include <stdexcept>

#include "daemon/log.h"

namespace espgw::daemon {

RouteTable::RouteTable(xfrm::RtNetlink& netlink, std::string tun_name)
    : netlink_(netlink),
      tun_name_(std::move(tun_name)),
      routing_(xfrm::routing_ids_for(tun_name_)) {}

void RouteTable::add_policy(const xfrm::Policy& policy) {
  if (policy.direction != xfrm::Direction::out) return;
  if (policy.action == xfrm::PolicyAction::bypass)
    add_fail_closed_route(xfrm::FailClosedRouteSet::Kind::bypass, policy.selector);
  if (policy.action != xfrm::PolicyAction::protect) return;
  // The fail-closed route before the TUN route: the destination is never routable in clear.
  add_fail_closed_route(xfrm::FailClosedRouteSet::Kind::fail_closed,
                        xfrm::fail_closed_selector(policy.selector.remote));
  auto& use = routes_[policy.selector.remote.to_string()];
  if (use.policies++ > 0) return;  // ours already
  use.prefix = policy.selector.remote;
  auto r = netlink_.add_route(use.prefix, tun_name_, std::nullopt, std::nullopt, routing_.table);
  if (!r && !r.already_exists())
    log(LogLevel::error, "%s", r.message.c_str());
  else if (r)
    log(LogLevel::info, "route %s dev %s table %u added", use.prefix.to_string().c_str(),
        tun_name_.c_str(), routing_.table);
}

void RouteTable::drop_policy(const xfrm::Policy& policy) {
  if (policy.direction != xfrm::Direction::out) return;
  if (policy.action == xfrm::PolicyAction::bypass)
    drop_fail_closed_route(xfrm::FailClosedRouteSet::Kind::bypass, policy.selector);
  if (policy.action != xfrm::PolicyAction::protect) return;
  auto use = routes_.find(policy.selector.remote.to_string());
  if (use != routes_.end() && --use->second.policies == 0) {
    if (auto r = netlink_.remove_route(use->second.prefix, tun_name_, std::nullopt, routing_.table);
        !r)
      log(LogLevel::warn, "%s", r.message.c_str());
    routes_.erase(use);
  }
  // After the TUN route: the destination stays closed to the last.
  drop_fail_closed_route(xfrm::FailClosedRouteSet::Kind::fail_closed,
                         xfrm::fail_closed_selector(policy.selector.remote));
}

void RouteTable::remove_tun_routes() {
  for (const auto& [text, route] : routes_)
    if (auto r = netlink_.remove_route(route.prefix, tun_name_, std::nullopt, routing_.table); !r)
      log(LogLevel::warn, "%s", r.message.c_str());
}

void RouteTable::adopt_fail_closed_routes() {
  if (auto r = xfrm::install_routing_rules(netlink_, routing_); !r)
    throw std::runtime_error("fail closed: " + r.message);
  std::vector<xfrm::RtNetlink::TableRoute> routes;
  if (auto r = netlink_.list_routes(routing_.table, routes); !r)
    throw std::runtime_error("fail closed: " + r.message);
  std::vector<xfrm::RtNetlink::Rule> rules;
  if (auto r = netlink_.list_rules(rules); !r)
    throw std::runtime_error("fail closed: " + r.message);
  size_t adopted = 0;
  for (const auto& route : routes)
    if (route.type == xfrm::RtNetlink::RouteType::prohibit) {
      fail_closed_routes_.adopt(xfrm::FailClosedRouteSet::Kind::fail_closed,
                                xfrm::fail_closed_selector(route.destination));
      ++adopted;
    }
  for (const auto& rule : rules)
    if (rule.priority == routing_.bypass_rule_priority &&
        rule.table == xfrm::RtNetlink::kMainTable) {
      fail_closed_routes_.adopt(xfrm::FailClosedRouteSet::Kind::bypass,
                                xfrm::bypass_selector(rule));
      ++adopted;
    }
  log(LogLevel::info,
      "fail closed: routing table %u (rule priority %u, bypass rules %u), %zu fail-closed "
      "route(s) or bypass rule(s) of an earlier run adopted",
      routing_.table, routing_.table_rule_priority, routing_.bypass_rule_priority, adopted);
}

xfrm::Result RouteTable::change_fail_closed_route(bool add, xfrm::FailClosedRouteSet::Kind kind,
                                                  const xfrm::Selector& selector) {
  if (kind == xfrm::FailClosedRouteSet::Kind::bypass) {
    const auto rule = xfrm::bypass_rule(selector, routing_.bypass_rule_priority);
    return add ? netlink_.add_rule(rule) : netlink_.remove_rule(rule);
  }
  return add ? netlink_.add_typed_route(xfrm::RtNetlink::RouteType::prohibit, selector.remote,
                                        routing_.table, xfrm::kFailClosedRouteMetric)
             : netlink_.remove_typed_route(xfrm::RtNetlink::RouteType::prohibit, selector.remote,
                                           routing_.table, xfrm::kFailClosedRouteMetric);
}

void RouteTable::remove_unused_fail_closed_routes() {
  for (const auto& entry : fail_closed_routes_.unused()) {
    const bool bypass = entry.kind == xfrm::FailClosedRouteSet::Kind::bypass;
    const auto r = change_fail_closed_route(false, entry.kind, entry.selector);
    if (!r && r.error != ESRCH && r.error != ENOENT)
      log(LogLevel::warn, "%s", r.message.c_str());
    else
      log(LogLevel::info, "fail closed: %s %s of an earlier run removed (no policy needs it)",
          bypass ? "bypass rule to" : "prohibit route", entry.selector.remote.to_string().c_str());
    fail_closed_routes_.forget(entry.kind, entry.selector);
  }
}

void RouteTable::add_fail_closed_route(xfrm::FailClosedRouteSet::Kind kind,
                                       const xfrm::Selector& selector) {
  if (!fail_closed_routes_.use(kind, selector)) return;  // in the kernel already
  const auto r = change_fail_closed_route(true, kind, selector);
  if (r || r.already_exists()) return;
  log(LogLevel::error, "fail closed: %s", r.message.c_str());
  // A fail-closed route the kernel refused leaves the destination open without espgw.
  if (kind == xfrm::FailClosedRouteSet::Kind::fail_closed) ++fail_closed_route_errors_;
}

void RouteTable::drop_fail_closed_route(xfrm::FailClosedRouteSet::Kind kind,
                                        const xfrm::Selector& selector) {
  if (!fail_closed_routes_.release(kind, selector, keep_fail_closed_routes_)) return;
  const auto r = change_fail_closed_route(false, kind, selector);
  if (!r && r.error != ESRCH && r.error != ENOENT) log(LogLevel::warn, "%s", r.message.c_str());
}

}  // namespace espgw::daemon
