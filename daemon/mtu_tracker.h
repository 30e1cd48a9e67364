// The MTUs the gateway derives from its SAs: the tunnel (TUN) MTU from the outbound SAs'
// path MTUs, the LAN MTU from the inbound SAs' local selectors, and the route MTUs behind
// both, looked up once per address. The lookup and the TUN MTU change are injected (the
// gateway passes rtnetlink), so the arithmetic is tested without a kernel.
//
// Not thread-safe: the gateway calls it under its control lock. The data path reads only
// the atomics (segment_limit, lan_mtu).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "esp/ip_address.h"
#include "esp/security_association.h"
#include "xfrm/netlink.h"
#include "xfrm/static_file.h"

namespace espgw::daemon {

class MtuTracker {
 public:
  using RouteMtuLookup = std::function<xfrm::MtuResult(const esp::IpAddress& destination)>;
  using SetTunMtu = std::function<xfrm::Result(unsigned mtu)>;
  struct Settings {
    std::string tun_name;                // for the log lines
    std::optional<unsigned> tunnel_mtu;  // configured: never derived
    std::optional<unsigned> lan_mtu;     // configured: never derived
    bool jumbo_segments = false;         // TSO super-packets cut at the tunnel MTU
  };

  MtuTracker(Settings settings, RouteMtuLookup route_mtu, SetTunMtu set_tun_mtu);

  // The TUN MTU to start with: the configured one, or the smallest an outbound SA of
  // `config` allows (1400 without any). Counts no SA: the SA table adds them as it installs.
  unsigned initial_tunnel_mtu(const xfrm::StaticConfig& config);

  // The TUN MTU an outbound SA allows: its peer's path MTU (looked up once per peer)
  // minus the worst-case ESP overhead; counted until remove_outbound. Also raises
  // max_path_mtu.
  unsigned add_outbound(const esp::SaConfig& sa);
  void remove_outbound(unsigned candidate);
  // The LAN MTU an inbound SA implies: the smallest route MTU towards its local traffic
  // selectors (0, not counted, when it has none narrower than "any").
  unsigned add_inbound(const esp::SaConfig& sa);
  void remove_inbound(unsigned candidate);
  // Forgets the route MTUs and every SA's candidate: a reload looks them up again (WAN
  // MTU changes), and the SA table adds its SAs anew.
  void forget_routes_and_sas();

  // Sets the TUN MTU to the smallest outbound candidate (within `buffer_limit`, what the
  // packet buffers hold), when it changed, and the LAN MTU and segment limit the TUN
  // reader and writer use.
  void update(size_t buffer_limit);

  unsigned tunnel_mtu() const { return tunnel_mtu_; }
  size_t max_path_mtu() const { return max_path_mtu_; }  // largest WAN path MTU to a peer
  // Read by the TUN reader per frame and the TUN writer per batch.
  const std::atomic<unsigned>& segment_limit() const { return segment_limit_; }
  const std::atomic<unsigned>& lan_mtu() const { return lan_mtu_; }

 private:
  unsigned outbound_candidate(const esp::SaConfig& sa);
  uint32_t route_mtu_cached(const esp::IpAddress& address);

  const Settings settings_;
  RouteMtuLookup route_mtu_;
  SetTunMtu set_tun_mtu_;
  unsigned tunnel_mtu_ = 0;
  size_t max_path_mtu_ = 1500;
  std::atomic<unsigned> segment_limit_{0};  // jumbo-segments: the tunnel MTU; else 0
  std::atomic<unsigned> lan_mtu_{1500};
  std::map<std::string, uint32_t> path_mtus_;   // route MTU by address (peers, local selectors)
  std::multiset<unsigned> mtu_candidates_;      // one per outbound SA
  std::multiset<unsigned> lan_mtu_candidates_;  // one per inbound SA with local selectors
};

}  // namespace espgw::daemon
