#include "xfrm/sad_entry.h"

#include <optional>
#include <vector>

namespace espgw::xfrm {

namespace {

bool same_encapsulation(const std::optional<esp::UdpEncapsulation>& a,
                        const std::optional<esp::UdpEncapsulation>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->source_port == b->source_port && a->destination_port == b->destination_port);
}

bool same_selectors(const std::vector<esp::TrafficSelector>& a,
                    const std::vector<esp::TrafficSelector>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto same = [](const esp::IpPrefix& x, const esp::IpPrefix& y) {
      return x.length == y.length && x.address == y.address;
    };
    if (!same(a[i].local, b[i].local) || !same(a[i].remote, b[i].remote)) return false;
    if (a[i].protocol != b[i].protocol || a[i].remote_port_first != b[i].remote_port_first ||
        a[i].remote_port_last != b[i].remote_port_last ||
        a[i].local_port_first != b[i].local_port_first ||
        a[i].local_port_last != b[i].local_port_last)
      return false;
  }
  return true;
}

}  // namespace

bool operator==(const SadEntry& a, const SadEntry& b) {
  return a.config.key_material == b.config.key_material && same_except_key(a, b);
}

bool same_except_key(const SadEntry& a, const SadEntry& b) {
  const esp::SaConfig& x = a.config;
  const esp::SaConfig& y = b.config;
  return x.spi == y.spi && x.algorithm == y.algorithm && x.integrity == y.integrity &&
         x.esn == y.esn && x.tunnel_source == y.tunnel_source &&
         x.tunnel_destination == y.tunnel_destination &&
         same_encapsulation(x.udp_encapsulation, y.udp_encapsulation) &&
         x.replay_window == y.replay_window && x.outer_header == y.outer_header &&
         x.tfc_pad_to == y.tfc_pad_to && same_selectors(x.selectors, y.selectors) &&
         a.direction == b.direction && a.reqid == b.reqid && a.lifetimes == b.lifetimes &&
         a.group_slot == b.group_slot && a.if_id == b.if_id;
}

}  // namespace espgw::xfrm
