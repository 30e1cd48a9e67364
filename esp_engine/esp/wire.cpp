#include "esp/wire.h"

#include "esp/esp_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

namespace {

constexpr uint8_t kHopByHop = 0, kRouting = 43, kFragment = 44, kDestinationOptions = 60;

DropReason parse_transport(const uint8_t* p, size_t offset, size_t end, uint8_t protocol,
                           WireInfo& info) {
  if (protocol == kProtocolEsp) {
    info.kind = WireKind::esp;
    info.payload_offset = offset;
    info.payload_length = end - offset;
    return DropReason::none;
  }
  if (protocol != kProtocolUdp) return DropReason::not_esp;
  if (end - offset < kUdpHeaderLength) return DropReason::too_short;
  const size_t udp_length = load_be16(p + offset + 4);
  if (udp_length < kUdpHeaderLength || udp_length > end - offset) return DropReason::malformed;
  info.udp = UdpEncapsulation{load_be16(p + offset), load_be16(p + offset + 2)};
  const uint8_t* payload = p + offset + kUdpHeaderLength;
  const size_t length = udp_length - kUdpHeaderLength;
  info.payload_offset = offset + kUdpHeaderLength;
  info.payload_length = length;
  if (length == 1 && payload[0] == 0xFF) {
    info.kind = WireKind::nat_keepalive;
    return DropReason::none;
  }
  if (length >= 4 && load_be32(payload) == 0) {  // non-ESP marker: SPI 0 is never valid
    info.kind = WireKind::ike;
    info.payload_offset += 4;
    info.payload_length -= 4;
    return DropReason::none;
  }
  info.kind = WireKind::esp;
  return length < kEspHeaderLength ? DropReason::too_short : DropReason::none;
}

DropReason parse_ipv4(const uint8_t* p, size_t size, WireInfo& info) {
  if (size < kIpv4HeaderLength) return DropReason::too_short;
  const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
  const size_t total_length = load_be16(p + 2);
  if (header_length < kIpv4HeaderLength || total_length < header_length || total_length > size)
    return DropReason::malformed;
  if (load_be16(p + 6) & 0x3FFF) return DropReason::outer_fragment;  // MF or an offset
  info.source = IpAddress::v4(p + 12);
  info.destination = IpAddress::v4(p + 16);
  return parse_transport(p, header_length, total_length, p[9], info);
}

DropReason parse_ipv6(const uint8_t* p, size_t size, WireInfo& info) {
  if (size < kIpv6HeaderLength) return DropReason::too_short;
  const size_t end = kIpv6HeaderLength + load_be16(p + 4);
  if (end > size) return DropReason::malformed;
  info.source = IpAddress::v6(p + 8);
  info.destination = IpAddress::v6(p + 24);
  uint8_t next = p[6];
  size_t offset = kIpv6HeaderLength;
  // Skip the extension headers a sender may legitimately put before ESP.
  while (next == kHopByHop || next == kRouting || next == kDestinationOptions ||
         next == kFragment) {
    if (next == kFragment) return DropReason::outer_fragment;
    if (end - offset < 8) return DropReason::malformed;
    const size_t length = (size_t{p[offset + 1]} + 1) * 8;
    if (length > end - offset) return DropReason::malformed;
    next = p[offset];
    offset += length;
  }
  return parse_transport(p, offset, end, next, info);
}

}  // namespace

DropReason parse_wire(std::span<const uint8_t> packet, WireInfo& info) {
  info = WireInfo{};
  if (packet.empty()) return DropReason::too_short;
  switch (packet[0] >> 4) {
    case 4:
      return parse_ipv4(packet.data(), packet.size(), info);
    case 6:
      return parse_ipv6(packet.data(), packet.size(), info);
    default:
      return DropReason::malformed;
  }
}

WireDecapResult decapsulate_wire(const InboundSaTable& table, EngineCounters& engine,
                                 PacketBuffer& packet, WireInfo* info_out) {
  WireInfo info;
  const DropReason parsed = parse_wire(packet.bytes(), info);
  if (info_out) *info_out = info;
  if (parsed != DropReason::none) {
    engine.count(parsed);
    return {parsed, info.kind};
  }
  packet.narrow(info.payload_offset, info.payload_length);
  switch (info.kind) {
    case WireKind::nat_keepalive:
      engine.count(DropReason::nat_keepalive);
      return {DropReason::nat_keepalive, WireKind::nat_keepalive};
    case WireKind::ike:
      return {DropReason::none, WireKind::ike};
    case WireKind::esp:
      break;
  }
  return {decapsulate(table, engine, packet), WireKind::esp};
}

}  // namespace espgw::esp
