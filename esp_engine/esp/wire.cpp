#include "esp/wire.h"

#include "esp/esp_format.h"
#include "packet/header_chain.h"
#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

namespace {

using packet::kUdpHeaderLength;

DropReason parse_transport(const uint8_t* p, size_t offset, size_t end, uint8_t protocol,
                           WireInfo& info) {
  if (protocol == packet::kProtocolEsp) {
    info.kind = WireKind::esp;
    info.payload_offset = offset;
    info.payload_length = end - offset;
    return DropReason::none;
  }
  if (protocol != packet::kProtocolUdp) return DropReason::not_esp;
  if (end - offset < kUdpHeaderLength) return DropReason::too_short;
  const size_t udp_length = load_be16(p + offset + 4);
  if (udp_length < kUdpHeaderLength || udp_length > end - offset) return DropReason::malformed;
  info.udp = UdpEncapsulation{load_be16(p + offset), load_be16(p + offset + 2)};
  const size_t length = udp_length - kUdpHeaderLength;
  info.payload_offset = offset + kUdpHeaderLength;
  info.payload_length = length;
  info.kind = udp_payload_kind({p + info.payload_offset, length});
  switch (info.kind) {
    case WireKind::nat_keepalive:
      return DropReason::none;
    case WireKind::ike:
      info.payload_offset += kNonEspMarkerLength;
      info.payload_length -= kNonEspMarkerLength;
      return DropReason::none;
    case WireKind::esp:
      break;
  }
  return length < kEspHeaderLength ? DropReason::too_short : DropReason::none;
}

// Any sign of fragmentation that the headers before it let the walk reach: IPv4 flags or
// offset, an IPv6 fragment header, an atomic one or one cut short included.
bool fragmented(const packet::HeaderChain& chain, size_t length) {
  if (chain.fragment != packet::Fragment::none) return true;
  return chain.end == packet::ChainEnd::truncated &&
         chain.protocol == packet::kProtocolIpv6Fragment && chain.offset <= length;
}

}  // namespace

DropReason parse_wire(std::span<const uint8_t> packet, WireInfo& info) {
  info = WireInfo{};
  if (packet.empty()) return DropReason::too_short;
  const uint8_t* p = packet.data();
  const unsigned version = p[0] >> 4;
  size_t length;  // as the IP header states it
  if (version == 4) {
    if (packet.size() < packet::kIpv4HeaderLength) return DropReason::too_short;
    length = load_be16(p + 2);
  } else if (version == 6) {
    if (packet.size() < packet::kIpv6HeaderLength) return DropReason::too_short;
    length = packet::kIpv6HeaderLength + load_be16(p + 4);
  } else {
    return DropReason::malformed;
  }
  if (length > packet.size()) return DropReason::malformed;
  // Bytes beyond the stated length are not part of the packet.
  const packet::HeaderChain chain = packet::walk_header_chain(packet.first(length));
  if (chain.end == packet::ChainEnd::not_ip) return DropReason::malformed;
  if (fragmented(chain, length)) return DropReason::outer_fragment;
  if (chain.end != packet::ChainEnd::upper_layer || chain.offset > length)
    return DropReason::malformed;
  if (version == 4) {
    info.source = IpAddress::v4(p + 12);
    info.destination = IpAddress::v4(p + 16);
    info.traffic_class = p[1];
  } else {
    info.source = IpAddress::v6(p + 8);
    info.destination = IpAddress::v6(p + 24);
    info.traffic_class = static_cast<uint8_t>((p[0] << 4) | (p[1] >> 4));
  }
  return parse_transport(p, chain.offset, length, chain.protocol, info);
}

}  // namespace espgw::esp
