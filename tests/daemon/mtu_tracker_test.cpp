// The MTU tracker without a kernel: route MTUs come from a table, the TUN MTU change is
// recorded.
#include "daemon/mtu_tracker.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "esp/esp_format.h"

namespace espgw::daemon {
namespace {

esp::IpAddress ip(std::string_view text) {
  return esp::IpAddress::parse(text).value();
}

class MtuTrackerTest : public ::testing::Test {
 protected:
  MtuTracker make(MtuTracker::Settings settings = {}) {
    settings.tun_name = "test0";
    return MtuTracker(
        settings,
        [this](const esp::IpAddress& destination) {
          ++lookups[destination.to_string()];
          xfrm::MtuResult result;
          const auto found = route_mtus.find(destination.to_string());
          if (found == route_mtus.end()) {
            result.ok = false;
            result.message = "no route to " + destination.to_string();
          } else {
            result.mtu = found->second;
          }
          return result;
        },
        [this](unsigned mtu) {
          tun_mtus.push_back(mtu);
          return xfrm::Result{};
        });
  }
  static esp::SaConfig outbound(std::string_view peer, bool udp = false) {
    esp::SaConfig sa;
    sa.tunnel_destination = ip(peer);
    if (udp) sa.udp_encapsulation = esp::UdpEncapsulation{};
    return sa;
  }
  static esp::SaConfig inbound(std::vector<std::string_view> local_prefixes) {
    esp::SaConfig sa;
    for (const auto prefix : local_prefixes) {
      esp::TrafficSelector selector;
      selector.local = *esp::IpPrefix::parse(prefix);
      selector.remote = *esp::IpPrefix::parse("0.0.0.0/0");
      sa.selectors.push_back(selector);
    }
    return sa;
  }

  std::map<std::string, uint32_t> route_mtus;
  std::map<std::string, unsigned> lookups;
  std::vector<unsigned> tun_mtus;
};

TEST_F(MtuTrackerTest, TunnelMtuIsThePathMtuLessTheWorstEspOverhead) {
  route_mtus = {{"192.0.2.2", 1500}, {"192.0.2.3", 1400}};
  MtuTracker mtu = make();
  const unsigned wide = mtu.add_outbound(outbound("192.0.2.2"));
  EXPECT_EQ(wide, 1500 - esp::max_esp_overhead(false, false));
  mtu.update(9000);
  EXPECT_EQ(mtu.tunnel_mtu(), wide);
  // A narrower path: the TUN follows the smallest; when it goes, back to the wider one.
  const unsigned narrow = mtu.add_outbound(outbound("192.0.2.3", true));
  EXPECT_EQ(narrow, 1400 - esp::max_esp_overhead(false, true));
  mtu.update(9000);
  EXPECT_EQ(mtu.tunnel_mtu(), narrow);
  mtu.remove_outbound(narrow);
  mtu.update(9000);
  EXPECT_EQ(mtu.tunnel_mtu(), wide);
  EXPECT_EQ(tun_mtus, (std::vector<unsigned>{wide, narrow, wide}));
  EXPECT_EQ(mtu.max_path_mtu(), 1500u);
}

TEST_F(MtuTrackerTest, RouteMtusAreLookedUpOncePerAddressUntilForgotten) {
  route_mtus = {{"192.0.2.2", 1500}};
  MtuTracker mtu = make();
  mtu.add_outbound(outbound("192.0.2.2"));
  mtu.add_outbound(outbound("192.0.2.2"));
  EXPECT_EQ(lookups["192.0.2.2"], 1u);
  mtu.forget_routes_and_sas();
  route_mtus["192.0.2.2"] = 1300;  // the WAN MTU changed; a reload sees it
  const unsigned candidate = mtu.add_outbound(outbound("192.0.2.2"));
  EXPECT_EQ(lookups["192.0.2.2"], 2u);
  mtu.update(9000);
  EXPECT_EQ(mtu.tunnel_mtu(), candidate);
}

TEST_F(MtuTrackerTest, AnUnknownRouteCountsAs1500AndTheBuffersBoundTheTunnelMtu) {
  MtuTracker mtu = make();
  const unsigned candidate = mtu.add_outbound(outbound("198.51.100.1"));
  EXPECT_EQ(candidate, 1500 - esp::max_esp_overhead(false, false));
  mtu.update(1000);
  EXPECT_EQ(mtu.tunnel_mtu(), 1000u);
}

TEST_F(MtuTrackerTest, WithoutOutboundSasTheTunnelMtuIs1400) {
  MtuTracker mtu = make();
  EXPECT_EQ(mtu.initial_tunnel_mtu({}), 1400u);
  mtu.update(9000);
  EXPECT_TRUE(tun_mtus.empty());
  EXPECT_EQ(mtu.tunnel_mtu(), 1400u);
}

TEST_F(MtuTrackerTest, ConfiguredMtusAreNeverDerived) {
  route_mtus = {{"192.0.2.2", 1280}, {"10.1.0.0", 1280}};
  MtuTracker mtu =
      make({.tun_name = "", .tunnel_mtu = 1300, .lan_mtu = 9000, .jumbo_segments = true});
  xfrm::StaticConfig config;
  config.sas.push_back({});
  config.sas.back().config = outbound("192.0.2.2");
  EXPECT_EQ(mtu.initial_tunnel_mtu(config), 1300u);
  EXPECT_TRUE(lookups.empty());
  mtu.add_outbound(outbound("192.0.2.2"));
  mtu.add_inbound(inbound({"10.1.0.0/16"}));
  mtu.update(9000);
  EXPECT_TRUE(tun_mtus.empty());
  EXPECT_EQ(mtu.tunnel_mtu(), 1300u);
  EXPECT_EQ(mtu.lan_mtu().load(), 9000u);
  EXPECT_EQ(mtu.segment_limit().load(), 1300u);  // jumbo segments: cut at the tunnel MTU
}

TEST_F(MtuTrackerTest, InitialTunnelMtuIsTheSmallestOutboundSas) {
  route_mtus = {{"192.0.2.2", 1500}, {"192.0.2.3", 1400}, {"192.0.2.4", 1000}};
  MtuTracker mtu = make();
  xfrm::StaticConfig config;
  for (const auto* peer : {"192.0.2.2", "192.0.2.3"}) {
    config.sas.push_back({});
    config.sas.back().config = outbound(peer);
  }
  config.sas.push_back({});
  config.sas.back().config = outbound("192.0.2.4");
  config.sas.back().direction = xfrm::Direction::in;  // says nothing about the tunnel
  EXPECT_EQ(mtu.initial_tunnel_mtu(config), 1400 - esp::max_esp_overhead(false, false));
  EXPECT_EQ(mtu.segment_limit().load(), 0u);  // no jumbo segments
}

TEST_F(MtuTrackerTest, LanMtuIsTheSmallestRouteTowardsInboundLocalSelectors) {
  route_mtus = {{"10.1.0.0", 9000}, {"10.2.0.0", 1400}};
  MtuTracker mtu = make();
  EXPECT_EQ(mtu.add_inbound(inbound({"0.0.0.0/0"})), 0u);  // "any" says nothing
  mtu.update(9000);
  EXPECT_EQ(mtu.lan_mtu().load(), 1500u);
  const unsigned jumbo = mtu.add_inbound(inbound({"10.1.0.0/16"}));
  EXPECT_EQ(jumbo, 9000u);
  mtu.update(9000);
  EXPECT_EQ(mtu.lan_mtu().load(), 9000u);
  const unsigned both = mtu.add_inbound(inbound({"10.1.0.0/16", "10.2.0.0/16"}));
  EXPECT_EQ(both, 1400u);
  mtu.update(9000);
  EXPECT_EQ(mtu.lan_mtu().load(), 1400u);
  mtu.remove_inbound(both);
  mtu.remove_inbound(0);  // not counted: nothing to remove
  mtu.update(9000);
  EXPECT_EQ(mtu.lan_mtu().load(), 9000u);
}

}  // namespace
}  // namespace espgw::daemon
