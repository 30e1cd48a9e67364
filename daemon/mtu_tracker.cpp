#include "daemon/mtu_tracker.h"

#include <algorithm>

#include "daemon/log.h"
#include "esp/esp_format.h"

namespace espgw::daemon {

MtuTracker::MtuTracker(Settings settings, RouteMtuLookup route_mtu, SetTunMtu set_tun_mtu)
    : settings_(std::move(settings)),
      route_mtu_(std::move(route_mtu)),
      set_tun_mtu_(std::move(set_tun_mtu)) {}

unsigned MtuTracker::initial_tunnel_mtu(const xfrm::StaticConfig& config) {
  if (settings_.tunnel_mtu) {
    tunnel_mtu_ = *settings_.tunnel_mtu;
    return tunnel_mtu_;
  }
  unsigned mtu = 0;
  for (const auto& sa : config.sas)
    if (sa.direction == xfrm::Direction::out) {
      const unsigned candidate = outbound_candidate(sa.config);
      mtu = mtu == 0 ? candidate : std::min(mtu, candidate);
    }
  tunnel_mtu_ = mtu == 0 ? 1400u : mtu;
  return tunnel_mtu_;
}

unsigned MtuTracker::outbound_candidate(const esp::SaConfig& sa) {
  // One route lookup per peer, not per SA: charon installs SAs one at a time. A reload
  // forgets the cache.
  const uint32_t path = route_mtu_cached(sa.tunnel_destination);
  max_path_mtu_ = std::max<size_t>(max_path_mtu_, path);
  const size_t overhead =
      esp::max_esp_overhead(sa.tunnel_destination.family == 6, sa.udp_encapsulation.has_value(),
                            esp::esp_layout(sa.algorithm, sa.integrity));
  return std::max(static_cast<unsigned>(path > overhead ? path - overhead : 576), 576u);
}

unsigned MtuTracker::add_outbound(const esp::SaConfig& sa) {
  const unsigned candidate = outbound_candidate(sa);
  mtu_candidates_.insert(candidate);
  return candidate;
}

void MtuTracker::remove_outbound(unsigned candidate) {
  mtu_candidates_.erase(mtu_candidates_.find(candidate));
}

unsigned MtuTracker::add_inbound(const esp::SaConfig& sa) {
  unsigned mtu = 0;
  for (const auto& selector : sa.selectors) {
    if (selector.local.length == 0) continue;  // "any" says nothing about the LAN
    const unsigned route = route_mtu_cached(selector.local.address);
    mtu = mtu == 0 ? route : std::min(mtu, route);
  }
  if (mtu) lan_mtu_candidates_.insert(mtu);
  return mtu;
}

void MtuTracker::remove_inbound(unsigned candidate) {
  if (candidate) lan_mtu_candidates_.erase(lan_mtu_candidates_.find(candidate));
}

void MtuTracker::forget_routes_and_sas() {
  path_mtus_.clear();
  mtu_candidates_.clear();
  lan_mtu_candidates_.clear();
}

uint32_t MtuTracker::route_mtu_cached(const esp::IpAddress& address) {
  const std::string text = address.to_string();
  auto cached = path_mtus_.find(text);
  if (cached == path_mtus_.end()) {
    const auto route = route_mtu_(address);
    if (!route) log(LogLevel::warn, "%s; assuming 1500", route.message.c_str());
    cached = path_mtus_.emplace(text, route ? route.mtu : 1500).first;
  }
  return cached->second;
}

void MtuTracker::update(size_t buffer_limit) {
  const unsigned lan_mtu = settings_.lan_mtu             ? *settings_.lan_mtu
                           : lan_mtu_candidates_.empty() ? 1500u
                                                         : *lan_mtu_candidates_.begin();
  if (lan_mtu != lan_mtu_.exchange(lan_mtu, std::memory_order_relaxed))
    log(LogLevel::info, "lan mtu %u: larger TCP packets from the tunnel are segmented to fit",
        lan_mtu);
  if (!settings_.tunnel_mtu) {
    // SAs towards a peer with a smaller path MTU may have arrived: the TUN MTU follows the
    // smallest, within what the packet buffers hold.
    const unsigned wanted = mtu_candidates_.empty() ? 1400u : *mtu_candidates_.begin();
    const unsigned mtu = std::min<unsigned>(wanted, static_cast<unsigned>(buffer_limit));
    if (mtu != tunnel_mtu_) {
      if (auto r = set_tun_mtu_(mtu); !r) {
        log(LogLevel::error, "%s", r.message.c_str());
      } else {
        log(LogLevel::info, "%s mtu %u -> %u", settings_.tun_name.c_str(), tunnel_mtu_, mtu);
        tunnel_mtu_ = mtu;
      }
    }
  }
  segment_limit_.store(settings_.jumbo_segments ? tunnel_mtu_ : 0, std::memory_order_relaxed);
}

}  // namespace espgw::daemon
