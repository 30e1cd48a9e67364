#include "daemon/wan_endpoints.h"

#include <algorithm>
#include <array>
#include <cstdio>

namespace espgw::daemon {

WanEndpoints::WanEndpoints(const std::vector<esp::IpAddress>& addresses) {
  for (size_t i = 0; i < addresses.size(); ++i) {
    auto endpoint = std::make_unique<WanEndpoint>();
    endpoint->address = addresses[i];
    if (i > 0) endpoint->prefix.append("a").append(std::to_string(i)).append("-");
    endpoints_.push_back(std::move(endpoint));
  }
}

WanEndpoint* WanEndpoints::find(const esp::IpAddress& address) {
  for (auto& endpoint : endpoints_)
    if (endpoint->address == address) return endpoint.get();
  return nullptr;
}

WanEndpoint* WanEndpoints::for_ike(const std::optional<esp::IpAddress>& source,
                                   const esp::IpAddress& peer) {
  const bool unspecified = !source || source->bytes == std::array<uint8_t, 16>{};
  if (!unspecified) return source->family == peer.family ? find(*source) : nullptr;
  for (auto& endpoint : endpoints_)
    if (endpoint->address.family == peer.family) return endpoint.get();
  return nullptr;
}

const esp::IpAddress& local_end(const xfrm::SadEntry& entry) {
  return entry.direction == xfrm::Direction::out ? entry.config.tunnel_source
                                                 : entry.config.tunnel_destination;
}

std::optional<std::string> WanEndpoints::refusal(const xfrm::SadEntry& entry) const {
  const esp::IpAddress& local = local_end(entry);
  if (std::any_of(endpoints_.begin(), endpoints_.end(),
                  [&](const auto& endpoint) { return endpoint->address == local; }))
    return std::nullopt;
  const bool out = entry.direction == xfrm::Direction::out;
  char spi[16];
  std::snprintf(spi, sizeof spi, "0x%08x", entry.config.spi);
  return std::string("SA ") + (out ? "out" : "in") + " spi " + spi + ": its " +
         (out ? "source " : "destination ") + local.to_string() +
         " is not a local-address of this gateway (" + list() + ")";
}

std::string WanEndpoints::list() const {
  std::string text;
  for (const auto& endpoint : endpoints_)
    text += (text.empty() ? "" : ", ") + endpoint->address.to_string();
  return text;
}

}  // namespace espgw::daemon
