#include "packet/flow_key.h"

#include "packet/header_chain.h"
#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::packet {

FlowKey FlowKey::reversed() const {
  FlowKey r = *this;
  r.source = destination;
  r.destination = source;
  r.source_port = destination_port;
  r.destination_port = source_port;
  return r;
}

std::optional<FlowKey> flow_key(std::span<const uint8_t> packet) {
  // The default rules: AH ends the chain, as a protocol that policies may name.
  const HeaderChain chain = walk_header_chain(packet);
  FlowKey key;
  if (chain.version == 4) {
    key.source = esp::IpAddress::v4(&packet[12]);
    key.destination = esp::IpAddress::v4(&packet[16]);
  } else if (chain.version == 6) {
    key.source = esp::IpAddress::v6(&packet[8]);
    key.destination = esp::IpAddress::v6(&packet[24]);
  } else {
    return std::nullopt;
  }
  if (chain.fragment == Fragment::first || chain.fragment == Fragment::later) {
    // What follows the fragment header of a later piece is payload, not headers, so the
    // protocol is the one the fragment header names in every piece, and what follows it
    // in the first piece does not matter.
    key.protocol = chain.fragment_protocol;
    return key;
  }
  if (chain.end != ChainEnd::upper_layer || chain.offset > packet.size()) return std::nullopt;
  key.protocol = chain.protocol;
  if (has_ports(key.protocol)) {
    if (packet.size() < chain.offset + kPortsLength) return std::nullopt;
    key.ports_known = true;
    key.source_port = load_be16(&packet[chain.offset]);
    key.destination_port = load_be16(&packet[chain.offset + 2]);
  }
  return key;
}

}  // namespace espgw::packet
