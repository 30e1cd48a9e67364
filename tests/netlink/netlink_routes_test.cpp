// RtNetlink on routes, tables, rules and the route MTU, read back through /proc and a
// route dump of our own.
#include "netlink_test_support.h"

namespace espgw::xfrm {
namespace {

// --- Routes ---------------------------------------------------------------------------------

TEST_F(RtNetlinkTest, Ipv4RouteAddRemove) {
  bring_up("espgw0");
  auto added = netlink_->add_route(prefix("10.1.0.0/16"), "espgw0", 50);
  ASSERT_TRUE(added.ok) << added.message;
  EXPECT_TRUE(contains(ipv4_routes(), "10.1.0.0/16 dev espgw0 metric 50"));
  auto dumped = find_route(AF_INET, "10.1.0.0/16");
  ASSERT_TRUE(dumped);
  EXPECT_EQ(dumped->protocol, RtNetlink::kRouteProtocol);
  EXPECT_EQ(dumped->scope, RT_SCOPE_LINK);
  EXPECT_EQ(dumped->table, static_cast<uint32_t>(RT_TABLE_MAIN));

  auto removed = netlink_->remove_route(prefix("10.1.0.0/16"), "espgw0", 50);
  ASSERT_TRUE(removed.ok) << removed.message;
  EXPECT_FALSE(contains(ipv4_routes(), "10.1.0.0/16 dev espgw0 metric 50"));
}

TEST_F(RtNetlinkTest, Ipv6RouteAddRemove) {
  bring_up("espgw0");
  auto added = netlink_->add_route(prefix("2001:db8:5::/48"), "espgw0");
  ASSERT_TRUE(added.ok) << added.message;
  // Without a metric the kernel gives IPv6 user routes 1024.
  EXPECT_TRUE(contains(ipv6_routes(), "2001:db8:5::/48 dev espgw0 metric 1024"));
  auto dumped = find_route(AF_INET6, "2001:db8:5::/48");
  ASSERT_TRUE(dumped);
  EXPECT_EQ(dumped->protocol, RtNetlink::kRouteProtocol);

  auto removed = netlink_->remove_route(prefix("2001:db8:5::/48"), "espgw0");
  ASSERT_TRUE(removed.ok) << removed.message;
  EXPECT_FALSE(contains(ipv6_routes(), "2001:db8:5::/48 dev espgw0 metric 1024"));
}

// Fail-closed routing (xfrm/fail_closed_routes.h): a table of espgw's own, prohibit routes
// that need no device, rules with selectors, and the dumps that find them again.
TEST_F(RtNetlinkTest, OwnTableProhibitRoutesAndRules) {
  bring_up("espgw0");
  constexpr uint32_t kTable = 0x45001234;
  ASSERT_TRUE(
      netlink_->add_route(prefix("10.2.0.0/16"), "espgw0", std::nullopt, std::nullopt, kTable).ok);
  auto prohibit = netlink_->add_typed_route(RtNetlink::RouteType::prohibit, prefix("10.2.0.0/16"),
                                            kTable, 4096);
  ASSERT_TRUE(prohibit.ok) << prohibit.message;
  ASSERT_TRUE(
      netlink_->add_typed_route(RtNetlink::RouteType::prohibit, prefix("fd00:2::/64"), kTable, 4096)
          .ok);
  EXPECT_TRUE(
      netlink_->add_typed_route(RtNetlink::RouteType::prohibit, prefix("10.2.0.0/16"), kTable, 4096)
          .already_exists());
  std::vector<RtNetlink::TableRoute> routes;
  ASSERT_TRUE(netlink_->list_routes(kTable, routes).ok);
  ASSERT_EQ(routes.size(), 3u);
  size_t prohibits = 0;
  for (const auto& route : routes)
    if (route.type == RtNetlink::RouteType::prohibit) {
      ++prohibits;
      EXPECT_EQ(route.metric, 4096u);
    }
  EXPECT_EQ(prohibits, 2u);
  // The main table knows nothing of them.
  std::vector<RtNetlink::TableRoute> main_routes;
  ASSERT_TRUE(netlink_->list_routes(RtNetlink::kMainTable, main_routes).ok);
  EXPECT_TRUE(main_routes.empty());

  RtNetlink::Rule rule;
  rule.family = 4;
  rule.priority = 31000;
  rule.source = prefix("10.1.0.0/16");
  rule.destination = prefix("10.2.99.0/24");
  rule.protocol = 17;
  rule.destination_ports = std::pair<uint16_t, uint16_t>{53, 53};
  auto added = netlink_->add_rule(rule);
  ASSERT_TRUE(added.ok) << added.message;
  EXPECT_TRUE(netlink_->add_rule(rule).already_exists());
  std::vector<RtNetlink::Rule> rules;
  ASSERT_TRUE(netlink_->list_rules(rules).ok);
  ASSERT_EQ(rules.size(), 1u);  // only ours (protocol 245), not the kernel's three
  EXPECT_EQ(rules[0].priority, 31000u);
  EXPECT_EQ(rules[0].table, RtNetlink::kMainTable);
  EXPECT_EQ(rules[0].source.to_string(), "10.1.0.0/16");
  EXPECT_EQ(rules[0].destination.to_string(), "10.2.99.0/24");
  EXPECT_EQ(rules[0].protocol, 17);
  EXPECT_FALSE(rules[0].source_ports);
  ASSERT_TRUE(rules[0].destination_ports);
  EXPECT_EQ(rules[0].destination_ports->first, 53);
  ASSERT_TRUE(netlink_->remove_rule(rule).ok);
  EXPECT_EQ(netlink_->remove_rule(rule).error, ENOENT);

  ASSERT_TRUE(
      netlink_
          ->remove_typed_route(RtNetlink::RouteType::prohibit, prefix("10.2.0.0/16"), kTable, 4096)
          .ok);
  routes.clear();
  ASSERT_TRUE(netlink_->list_routes(kTable, routes).ok);
  EXPECT_EQ(routes.size(), 2u);
}

TEST_F(RtNetlinkTest, RouteMtuMetricIsInstalled) {
  bring_up("espgw0");
  ASSERT_TRUE(netlink_->add_route(prefix("10.14.0.0/16"), "espgw0", std::nullopt, 1400).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("2001:db8:14::/48"), "espgw0", std::nullopt, 1400).ok);
  auto v4 = find_route(AF_INET, "10.14.0.0/16");
  auto v6 = find_route(AF_INET6, "2001:db8:14::/48");
  ASSERT_TRUE(v4 && v6);
  EXPECT_EQ(v4->mtu, 1400u);
  EXPECT_EQ(v6->mtu, 1400u);
}

TEST_F(RtNetlinkTest, AddingAnExistingRouteReportsEexist) {
  bring_up("espgw0");
  for (const char* text : {"10.1.0.0/16", "2001:db8:5::/48"}) {
    ASSERT_TRUE(netlink_->add_route(prefix(text), "espgw0").ok) << text;
    auto again = netlink_->add_route(prefix(text), "espgw0");
    EXPECT_FALSE(again.ok);
    EXPECT_TRUE(again.already_exists()) << again.message;
    EXPECT_THAT(again.message, HasSubstr(std::string("add route ") + text + " dev espgw0"));
    EXPECT_THAT(again.message, HasSubstr("already exists"));
    // A different metric is a different route, not a duplicate.
    EXPECT_TRUE(netlink_->add_route(prefix(text), "espgw0", 7).ok) << text;
  }
}

TEST_F(RtNetlinkTest, RemovingAMissingRouteNamesThePrefix) {
  bring_up("espgw0");
  auto v4 = netlink_->remove_route(prefix("10.9.0.0/16"), "espgw0");
  EXPECT_FALSE(v4.ok);
  EXPECT_EQ(v4.error, ESRCH);
  EXPECT_EQ(v4.message.substr(0, v4.message.find(" (")),
            "remove route 10.9.0.0/16 dev espgw0: not found");

  auto v6 = netlink_->remove_route(prefix("2001:db8:9::/48"), "espgw0", 5);
  EXPECT_FALSE(v6.ok);
  EXPECT_EQ(v6.error, ESRCH);
  EXPECT_THAT(v6.message, HasSubstr("remove route 2001:db8:9::/48 dev espgw0 metric 5: not found"));
}

TEST_F(RtNetlinkTest, RouteThroughADownLinkCarriesKernelReason) {
  auto result = netlink_->add_route(prefix("10.1.0.0/16"), "espgw0");  // espgw0 is down
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, ENETDOWN);
  EXPECT_THAT(result.message, HasSubstr("add route 10.1.0.0/16 dev espgw0"));
  EXPECT_THAT(result.message, HasSubstr("kernel says"));
}

TEST_F(RtNetlinkTest, RoutePrefixWithHostBitsIsRefused) {
  bring_up("espgw0");
  auto result = netlink_->add_route(prefix("10.1.2.3/16"), "espgw0");
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, EINVAL);
  EXPECT_THAT(result.message, HasSubstr("add route 10.1.2.3/16 dev espgw0"));
}

// --- Path MTU -------------------------------------------------------------------------------

TEST_F(RtNetlinkTest, RouteMtuIsTheLinkMtuWithoutARouteMetric) {
  bring_up("espgw0");
  ASSERT_TRUE(netlink_->set_mtu("espgw0", 9000).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("10.90.0.0/16"), "espgw0").ok);
  ASSERT_TRUE(netlink_->add_route(prefix("2001:db8:90::/48"), "espgw0").ok);

  for (const char* destination : {"10.90.1.1", "2001:db8:90::1"}) {
    auto result = netlink_->route_mtu(address(destination));
    ASSERT_TRUE(result.ok) << result.message;
    EXPECT_EQ(result.mtu, 9000u) << destination;
    EXPECT_EQ(result.interface, "espgw0") << destination;
  }
}

TEST_F(RtNetlinkTest, RouteMtuPrefersTheRouteMetric) {
  bring_up("espgw0");
  bring_up("espgw1");
  ASSERT_TRUE(netlink_->set_mtu("espgw0", 9000).ok);
  ASSERT_TRUE(netlink_->set_mtu("espgw1", 9000).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("10.90.0.0/16"), "espgw0").ok);
  ASSERT_TRUE(netlink_->add_route(prefix("10.14.0.0/16"), "espgw1", std::nullopt, 1400).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("2001:db8:14::/48"), "espgw1", std::nullopt, 1400).ok);

  auto wide = netlink_->route_mtu(address("10.90.7.7"));
  ASSERT_TRUE(wide.ok) << wide.message;
  EXPECT_EQ(wide.mtu, 9000u);
  EXPECT_EQ(wide.interface, "espgw0");

  for (const char* destination : {"10.14.1.1", "2001:db8:14::1"}) {
    auto narrow = netlink_->route_mtu(address(destination));
    ASSERT_TRUE(narrow.ok) << narrow.message;
    EXPECT_EQ(narrow.mtu, 1400u) << destination;
    EXPECT_EQ(narrow.interface, "espgw1") << destination;
  }
}

TEST_F(RtNetlinkTest, RouteMtuIsBoundedByTheLinkMtu) {
  bring_up("espgw0");
  ASSERT_TRUE(netlink_->set_mtu("espgw0", 1400).ok);
  auto added = netlink_->add_route(prefix("10.15.0.0/16"), "espgw0", std::nullopt, 9000);
  ASSERT_TRUE(added.ok) << added.message;
  auto result = netlink_->route_mtu(address("10.15.0.1"));
  ASSERT_TRUE(result.ok) << result.message;
  EXPECT_EQ(result.mtu, 1400u);
}

TEST_F(RtNetlinkTest, RouteMtuWithoutARouteIsUnreachable) {
  auto result = netlink_->route_mtu(address("192.0.2.1"));  // the new namespace has no routes
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, ENETUNREACH);
  EXPECT_THAT(result.message, HasSubstr("route mtu towards 192.0.2.1"));
}

}  // namespace
}  // namespace espgw::xfrm
