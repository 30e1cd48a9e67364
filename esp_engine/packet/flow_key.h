// The fields of an inner IP packet that policies select on and ECMP spreads flows by,
// extracted once per packet.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "esp/ip_address.h"

namespace espgw::packet {

struct FlowKey {
  esp::IpAddress source;
  esp::IpAddress destination;
  uint8_t protocol = 0;  // the upper-layer protocol (after IPv6 extension headers)
  // Ports are known for TCP, UDP, UDP-Lite and SCTP packets that are not fragments. Every
  // piece of a fragmented datagram reports no ports, even the first one that carries
  // them, so that all pieces are classified alike (RFC 4301 7: non-initial fragments
  // have OPAQUE ports).
  bool ports_known = false;
  uint16_t source_port = 0;
  uint16_t destination_port = 0;

  // The same flow seen from the other end: addresses and ports swapped.
  FlowKey reversed() const;
  bool operator==(const FlowKey&) const = default;
};

// Returns nullopt for anything that is not a well-formed IPv4 or IPv6 header chain
// (wrong version, truncated header, extension header or port field); the caller drops
// such packets with a counted reason. Lengths in the headers beyond that are the ESP
// layer's to check.
std::optional<FlowKey> flow_key(std::span<const uint8_t> packet);

}  // namespace espgw::packet
