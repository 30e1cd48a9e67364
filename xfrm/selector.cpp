#include "xfrm/selector.h"

namespace espgw::xfrm {

bool Selector::matches(const packet::FlowKey& key) const {
  if (!local.contains(key.source) || !remote.contains(key.destination)) return false;
  if (protocol != 0 && protocol != key.protocol) return false;
  if (!local_ports.is_any() && !(key.ports_known && local_ports.contains(key.source_port)))
    return false;
  if (!remote_ports.is_any() && !(key.ports_known && remote_ports.contains(key.destination_port)))
    return false;
  return true;
}

unsigned Selector::specificity() const {
  // Prefix bits dominate (at most 256); each of the three narrower fields adds less than
  // one prefix bit would.
  unsigned score = (unsigned{local.length} + remote.length) * 4;
  if (protocol != 0) ++score;
  if (!local_ports.is_any()) ++score;
  if (!remote_ports.is_any()) ++score;
  return score;
}

bool same_prefix(const esp::IpPrefix& a, const esp::IpPrefix& b) {
  return a.length == b.length && a.address.family == b.address.family && a.contains(b.address) &&
         b.contains(a.address);
}

bool Selector::operator==(const Selector& other) const {
  return same_prefix(local, other.local) && same_prefix(remote, other.remote) &&
         protocol == other.protocol && local_ports == other.local_ports &&
         remote_ports == other.remote_ports;
}

}  // namespace espgw::xfrm
