// The bookkeeping of fail-closed routes and bypass rules (xfrm/fail_closed_routes.h):
// what to add and remove as policies come and go, and what an earlier run left behind.
#include "xfrm/fail_closed_routes.h"

#include <gtest/gtest.h>

namespace espgw::xfrm {
namespace {

using Kind = FailClosedRouteSet::Kind;

esp::IpPrefix prefix(const char* text) {
  return *esp::IpPrefix::parse(text);
}
Selector closed(const char* remote) {
  return fail_closed_selector(prefix(remote));
}
Selector bypass(const char* local, const char* remote) {
  Selector selector;
  selector.local = prefix(local);
  selector.remote = prefix(remote);
  return selector;
}

TEST(FailClosedRouteSet, AddedOnFirstUseRemovedWithTheLast) {
  FailClosedRouteSet set;
  EXPECT_TRUE(set.use(Kind::fail_closed, closed("10.2.0.0/16")));
  EXPECT_FALSE(set.use(Kind::fail_closed, closed("10.2.0.0/16")));  // a second policy
  EXPECT_EQ(set.users(Kind::fail_closed, closed("10.2.0.0/16")), 2u);
  EXPECT_FALSE(set.release(Kind::fail_closed, closed("10.2.0.0/16"), false));
  EXPECT_TRUE(set.release(Kind::fail_closed, closed("10.2.0.0/16"), false));
  EXPECT_TRUE(set.fail_closed_prefixes().empty());
  // Releasing what is not there changes nothing.
  EXPECT_FALSE(set.release(Kind::fail_closed, closed("10.2.0.0/16"), false));
}

TEST(FailClosedRouteSet, OneRoutePerRemotePrefixWhateverTheLocalSide) {
  // Two out protect policies to 10.2.0.0/16 from different LANs share the route.
  FailClosedRouteSet set;
  Selector a = closed("10.2.0.0/16");
  Selector b = closed("10.2.0.0/16");
  b.local = prefix("10.7.0.0/16");
  EXPECT_TRUE(set.use(Kind::fail_closed, a));
  EXPECT_FALSE(set.use(Kind::fail_closed, b));
}

TEST(FailClosedRouteSet, BypassRulesAreWholeSelectorsApartFromRoutes) {
  FailClosedRouteSet set;
  EXPECT_TRUE(set.use(Kind::fail_closed, closed("10.2.0.0/16")));
  EXPECT_TRUE(set.use(Kind::bypass, bypass("10.1.0.0/16", "10.2.0.0/16")));
  EXPECT_TRUE(set.use(Kind::bypass, bypass("10.1.5.0/24", "10.2.0.0/16")));  // other source
  Selector udp = bypass("10.1.0.0/16", "10.2.0.0/16");
  udp.protocol = 17;
  udp.remote_ports = {53, 53};
  EXPECT_TRUE(set.use(Kind::bypass, udp));
  EXPECT_EQ(set.fail_closed_prefixes().size(), 1u);
  EXPECT_TRUE(set.release(Kind::bypass, bypass("10.1.0.0/16", "10.2.0.0/16"), false));
  EXPECT_EQ(set.users(Kind::bypass, udp), 1u);
  EXPECT_EQ(set.users(Kind::fail_closed, closed("10.2.0.0/16")), 1u);
}

TEST(FailClosedRouteSet, KeptUnusedRouteStaysUntilForgottenOrUsedAgain) {
  // charon restarted: its policies went, the routes stay until it installs them again.
  FailClosedRouteSet set;
  set.use(Kind::fail_closed, closed("10.2.0.0/16"));
  EXPECT_FALSE(set.release(Kind::fail_closed, closed("10.2.0.0/16"), true));
  ASSERT_EQ(set.unused().size(), 1u);
  EXPECT_EQ(set.unused()[0].selector.remote.to_string(), "10.2.0.0/16");
  EXPECT_EQ(set.fail_closed_prefixes().size(), 1u);                 // still closed
  EXPECT_FALSE(set.use(Kind::fail_closed, closed("10.2.0.0/16")));  // in the kernel already
  EXPECT_TRUE(set.unused().empty());
  set.forget(Kind::fail_closed, closed("10.2.0.0/16"));
  EXPECT_TRUE(set.fail_closed_prefixes().empty());
}

TEST(FailClosedRouteSet, AdoptedAreTakenOverOrLeftUnused) {
  FailClosedRouteSet set;
  set.adopt(Kind::fail_closed, closed("10.2.0.0/16"));
  set.adopt(Kind::fail_closed, closed("10.3.0.0/16"));
  set.adopt(Kind::bypass, bypass("10.1.0.0/16", "10.2.99.0/24"));
  // The static file still protects 10.2.0.0/16: no second add, no removal.
  EXPECT_FALSE(set.use(Kind::fail_closed, closed("10.2.0.0/16")));
  const auto unused = set.unused();
  ASSERT_EQ(unused.size(), 2u);
  EXPECT_EQ(unused[0].kind, Kind::bypass);
  EXPECT_EQ(unused[1].selector.remote.to_string(), "10.3.0.0/16");
  // Adopting again (a second scan) adds no user.
  set.adopt(Kind::fail_closed, closed("10.2.0.0/16"));
  EXPECT_EQ(set.users(Kind::fail_closed, closed("10.2.0.0/16")), 1u);
}

TEST(FailClosedRouteSet, BypassRuleRoundTrip) {
  Selector selector = bypass("10.1.0.0/16", "10.2.99.0/24");
  selector.protocol = 6;
  selector.remote_ports = {22, 22};
  const auto rule = bypass_rule(selector, 31000);
  EXPECT_EQ(rule.family, 4);
  EXPECT_EQ(rule.priority, 31000u);
  EXPECT_EQ(rule.table, RtNetlink::kMainTable);  // routed as without espgw
  EXPECT_EQ(rule.source.to_string(), "10.1.0.0/16");
  EXPECT_EQ(rule.destination.to_string(), "10.2.99.0/24");
  EXPECT_FALSE(rule.source_ports.has_value());
  ASSERT_TRUE(rule.destination_ports.has_value());
  EXPECT_EQ(rule.destination_ports->first, 22);
  EXPECT_EQ(bypass_selector(rule), selector);
}

TEST(FailClosedRouteSet, RoutingIdsPerTunName) {
  const auto ids = routing_ids_for("espgw0");
  EXPECT_EQ(ids.table, routing_ids_for("espgw0").table);
  EXPECT_NE(ids.table, routing_ids_for("espgw1").table);
  EXPECT_EQ(ids.table & 0xFF000000u, 0x45000000u);
  // Before the main table's rule (32766), the bypass rules just before the table's.
  EXPECT_GE(ids.table_rule_priority, 31001u);
  EXPECT_LE(ids.table_rule_priority, 31799u);
  EXPECT_EQ(ids.bypass_rule_priority + 1, ids.table_rule_priority);
  // Behind the TUN route of either family.
  EXPECT_GT(kFailClosedRouteMetric, 1024u);
}

}  // namespace
}  // namespace espgw::xfrm
