// Traffic selectors: which inner packets a policy covers, like the kernel's
// xfrm_selector (RFC 4301 4.4.1: addresses, next-layer protocol, ports).
#pragma once

#include <cstdint>

#include "esp/ip_address.h"
#include "packet/flow_key.h"

namespace espgw::xfrm {

struct PortRange {
  uint16_t first = 0;
  uint16_t last = 65535;

  bool is_any() const { return first == 0 && last == 65535; }
  bool contains(uint16_t port) const { return port >= first && port <= last; }
  bool operator==(const PortRange&) const = default;
};

// Addresses are named from this gateway's point of view, whatever the direction: `local`
// is the protected network behind us, `remote` the one behind the peer. That way the out
// and in policies of one tunnel carry the same selector.
struct Selector {
  esp::IpPrefix local;
  esp::IpPrefix remote;
  uint8_t protocol = 0;  // 0 = any
  // A port range other than "any" only matches packets whose ports are known, so it
  // never matches fragments or protocols without ports.
  PortRange local_ports;
  PortRange remote_ports;

  // `key` oriented local -> remote, i.e. as an outbound packet carries it; for a packet
  // arriving from the tunnel pass key.reversed(). Local and remote must be one family:
  // an IPv4 selector never matches an IPv6 packet.
  bool matches(const packet::FlowKey& key) const;

  // Orders selectors that match the same packet: longer prefixes (local + remote bits)
  // first; with equal prefixes, a fixed protocol and fixed port ranges count.
  unsigned specificity() const;

  bool operator==(const Selector&) const;
};

// Equal as selectors: same prefix length and same network bits (host bits ignored).
bool same_prefix(const esp::IpPrefix& a, const esp::IpPrefix& b);

}  // namespace espgw::xfrm
