#include "xfrm/fail_closed_routes.h"

#include <net/if.h>

#include <cerrno>
#include <utility>

namespace espgw::xfrm {

RoutingIds routing_ids_for(std::string_view tun_name) {
  uint32_t hash = 2166136261u;
  for (const char c : tun_name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 16777619u;
  }
  RoutingIds ids;
  ids.table = 0x45000000u | (hash & 0x00FFFFFFu);
  ids.table_rule_priority = 31001 + 2 * ((hash >> 24) % 400);
  ids.bypass_rule_priority = ids.table_rule_priority - 1;
  return ids;
}

std::string FailClosedRouteSet::key(Kind kind, const Selector& selector) {
  if (kind == Kind::fail_closed) return "p " + selector.remote.to_string();
  return "b " + selector.local.to_string() + " " + selector.remote.to_string() + " " +
         std::to_string(selector.protocol) + " " + std::to_string(selector.local_ports.first) +
         "-" + std::to_string(selector.local_ports.last) + " " +
         std::to_string(selector.remote_ports.first) + "-" +
         std::to_string(selector.remote_ports.last);
}

bool FailClosedRouteSet::use(Kind kind, const Selector& selector) {
  auto [slot, fresh] = slots_.try_emplace(key(kind, selector));
  if (fresh) {
    slot->second.entry = {kind, selector};
    note(kind, selector, true);
  }
  ++slot->second.users;
  return fresh;
}

bool FailClosedRouteSet::release(Kind kind, const Selector& selector, bool keep_unused) {
  auto slot = slots_.find(key(kind, selector));
  if (slot == slots_.end()) return false;
  if (slot->second.users > 0) --slot->second.users;
  if (slot->second.users > 0 || keep_unused) return false;
  note(kind, selector, false);
  slots_.erase(slot);
  return true;
}

void FailClosedRouteSet::adopt(Kind kind, const Selector& selector) {
  auto [slot, fresh] = slots_.try_emplace(key(kind, selector));
  if (fresh) {
    slot->second.entry = {kind, selector};
    note(kind, selector, true);
  }
}

std::vector<FailClosedRouteSet::Entry> FailClosedRouteSet::unused() const {
  std::vector<Entry> entries;
  for (const auto& [text, slot] : slots_)
    if (slot.users == 0) entries.push_back(slot.entry);
  return entries;
}

void FailClosedRouteSet::forget(Kind kind, const Selector& selector) {
  if (slots_.erase(key(kind, selector)) != 0) note(kind, selector, false);
}

void FailClosedRouteSet::note(Kind kind, const Selector& selector, bool added) {
  if (kind == Kind::fail_closed) prefix_changes_.emplace_back(selector.remote, added);
}

std::vector<std::pair<esp::IpPrefix, bool>> FailClosedRouteSet::take_prefix_changes() {
  return std::exchange(prefix_changes_, {});
}

std::vector<esp::IpPrefix> FailClosedRouteSet::fail_closed_prefixes() const {
  std::vector<esp::IpPrefix> prefixes;
  for (const auto& [text, slot] : slots_)
    if (slot.entry.kind == Kind::fail_closed) prefixes.push_back(slot.entry.selector.remote);
  return prefixes;
}

size_t FailClosedRouteSet::users(Kind kind, const Selector& selector) const {
  const auto slot = slots_.find(key(kind, selector));
  return slot == slots_.end() ? 0 : slot->second.users;
}

Selector fail_closed_selector(const esp::IpPrefix& prefix) {
  Selector selector;
  selector.local.address.family = prefix.address.family;
  selector.remote = prefix;
  return selector;
}

RtNetlink::Rule bypass_rule(const Selector& selector, uint32_t priority) {
  RtNetlink::Rule rule;
  rule.family = selector.remote.address.family == 4 ? 4 : 6;
  rule.priority = priority;
  rule.table = RtNetlink::kMainTable;
  rule.source = selector.local;
  rule.destination = selector.remote;
  rule.protocol = selector.protocol;
  if (!selector.local_ports.is_any())
    rule.source_ports = {selector.local_ports.first, selector.local_ports.last};
  if (!selector.remote_ports.is_any())
    rule.destination_ports = {selector.remote_ports.first, selector.remote_ports.last};
  return rule;
}

Selector bypass_selector(const RtNetlink::Rule& rule) {
  Selector selector;
  selector.local = rule.source;
  selector.remote = rule.destination;
  selector.protocol = rule.protocol;
  if (rule.source_ports)
    selector.local_ports = {rule.source_ports->first, rule.source_ports->second};
  if (rule.destination_ports)
    selector.remote_ports = {rule.destination_ports->first, rule.destination_ports->second};
  return selector;
}

namespace {

RtNetlink::Rule table_rule(int family, const RoutingIds& ids) {
  RtNetlink::Rule rule;
  rule.family = family;
  rule.priority = ids.table_rule_priority;
  rule.table = ids.table;
  rule.source.address.family = static_cast<uint8_t>(family);
  rule.destination.address.family = static_cast<uint8_t>(family);
  return rule;
}

}  // namespace

Result install_routing_rules(RtNetlink& netlink, const RoutingIds& ids) {
  std::vector<RtNetlink::Rule> rules;
  if (auto listed = netlink.list_rules(rules); !listed) return listed;
  for (const auto& rule : rules)
    if (rule.priority == ids.table_rule_priority && rule.table != ids.table) {
      Result clash;
      clash.ok = false;
      clash.error = EEXIST;
      clash.message = "another espgw's rule (table " + std::to_string(rule.table) +
                      ") has priority " + std::to_string(rule.priority) +
                      ", the one this tun-name gives; choose another tun-name";
      return clash;
    }
  for (const int family : {4, 6}) {
    const Result added = netlink.add_rule(table_rule(family, ids));
    if (!added && !added.already_exists()) return added;
  }
  return {};
}

Result release_routing(RtNetlink& netlink, const RoutingIds& ids, size_t& removed) {
  Result first;
  auto note = [&](const Result& result) {
    if (!result && first) first = result;
  };
  std::vector<RtNetlink::TableRoute> routes;
  note(netlink.list_routes(ids.table, routes));
  for (const auto& route : routes) {
    Result result;
    if (route.type == RtNetlink::RouteType::unicast) {
      // A TUN route outlives its daemon only while the device does (a daemon that still
      // runs); without the device the kernel removed the route already.
      char name[IF_NAMESIZE] = {};
      if (!if_indextoname(route.output_interface, name)) continue;
      result = netlink.remove_route(route.destination, name, std::nullopt, ids.table);
    } else {
      result = netlink.remove_typed_route(route.type, route.destination, ids.table, route.metric);
    }
    if (result) ++removed;
    note(result);
  }
  std::vector<RtNetlink::Rule> rules;
  note(netlink.list_rules(rules));
  for (const auto& rule : rules) {
    const bool bypass =
        rule.priority == ids.bypass_rule_priority && rule.table == RtNetlink::kMainTable;
    const bool table = rule.priority == ids.table_rule_priority && rule.table == ids.table;
    if (!bypass && !table) continue;
    const Result result = netlink.remove_rule(rule);
    if (result && bypass) ++removed;
    note(result);
  }
  return first;
}

}  // namespace espgw::xfrm
