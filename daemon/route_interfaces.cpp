#include "daemon/route_interfaces.h"

#include <fcntl.h>

#include <stdexcept>

#include "daemon/log.h"

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

void RouteInterfaces::bring_up(xfrm::RtNetlink& netlink, unsigned mtu) {
  for (auto& [if_id, device] : devices_) {
    if (auto r = netlink.set_mtu(device.tun->name(), mtu); !r) throw std::runtime_error(r.message);
    if (auto r = netlink.set_link_up(device.tun->name()); !r) throw std::runtime_error(r.message);
    log(LogLevel::info, "interface id %u: %s (route-based: the routes over it are the operator's)",
        if_id, device.tun->name().c_str());
  }
}

xfrm::Result RouteInterfaces::set_mtu(xfrm::RtNetlink& netlink, unsigned mtu) {
  xfrm::Result result;
  for (auto& [if_id, device] : devices_)
    if (auto r = netlink.set_mtu(device.tun->name(), mtu); !r) result = r;
  return result;
}

void RouteInterfaces::start_readers(std::vector<std::thread>& threads) {
  for (auto& [if_id, entry] : devices_) {
    RouteInterfaceDevice* device = &entry;
    for (unsigned q = 0; q < device->tun->queues(); ++q) {
      if (device->tun->vnet_header())
        threads.emplace_back([device, q] { device->outbound->read_tun_offload(q); });
      else
        threads.emplace_back([device, q] { device->outbound->read_tun(q); });
    }
  }
}

bool RouteInterfaces::add_policy(const xfrm::Policy& policy) {
  auto* device = find(policy.if_id);
  if (!device) {
    log(LogLevel::error, "policy %u refused: no interface has id %u", policy.id, policy.if_id);
    return false;
  }
  return device->spd->add(policy);
}

void RouteInterfaces::remove_policy(const xfrm::Policy& policy) {
  if (auto* device = find(policy.if_id)) device->spd->remove(policy.id);
}

std::optional<xfrm::Policy> RouteInterfaces::find_policy(uint32_t if_id, uint32_t id) const {
  const auto* device = find(if_id);
  return device ? device->spd->find(id) : std::nullopt;
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
