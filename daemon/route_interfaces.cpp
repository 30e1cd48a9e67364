#include "daemon/route_interfaces.h"

#include <fcntl.h>

#include <stdexcept>

namespace espgw::daemon {

RouteInterfaces::RouteInterfaces(const std::vector<RouteInterface>& interfaces, unsigned queues,
                                 bool offload, const Shared& shared) {
  for (const auto& interface : interfaces) {
    RouteInterfaceDevice& device = devices_[interface.if_id];
    device.if_id = interface.if_id;
    try {
      device.tun = std::make_unique<io::TunDevice>(interface.name, queues, offload);
    } catch (const std::exception& e) {
      throw std::runtime_error("interface " + std::to_string(interface.if_id) + " " +
                               interface.name + ": " + e.what());
    }
    for (unsigned q = 0; q < device.tun->queues(); ++q)
      fcntl(device.tun->fd(q), F_SETFL, fcntl(device.tun->fd(q), F_GETFL) | O_NONBLOCK);
    device.writer = std::make_unique<TunWriter>(*device.tun, shared.counters, shared.lan_mtu);
    device.outbound = std::make_unique<OutboundPath>(
        *device.tun, shared.pipeline, shared.lookup, shared.segment_limit, shared.counters,
        shared.acquires, shared.flow_seed, shared.running, device.spd.get());
  }
}

RouteInterfaceDevice* RouteInterfaces::find(uint32_t if_id) {
  const auto found = devices_.find(if_id);
  return found == devices_.end() ? nullptr : &found->second;
}

const RouteInterfaceDevice* RouteInterfaces::find(uint32_t if_id) const {
  const auto found = devices_.find(if_id);
  return found == devices_.end() ? nullptr : &found->second;
}

std::vector<RouteInterfaceDevice*> RouteInterfaces::all() {
  std::vector<RouteInterfaceDevice*> out;
  for (auto& [id, device] : devices_) out.push_back(&device);
  return out;
}

std::string RouteInterfaces::refusal(uint32_t if_id) const {
  if (if_id == 0 || find(if_id)) return {};
  return "interface id " + std::to_string(if_id) +
         " has no TUN device: espgw.conf needs 'interface = " + std::to_string(if_id) +
         " NAME' (route-based VPN)";
}

std::string RouteInterfaces::name_of(uint32_t if_id) const {
  const auto* device = find(if_id);
  return device ? device->tun->name() : std::string();
}

}  // namespace espgw::daemon
