// Outer-header parsing for packets as they arrive from the WAN: IPv4 or IPv6, then raw
// ESP (protocol 50) or UDP. On UDP, RFC 3948 demultiplexing: a 4-byte zero non-ESP marker
// means IKE, a single 0xFF byte is a NAT keepalive, anything else is ESP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "esp/drop_reason.h"
#include "esp/ip_address.h"
#include "esp/security_association.h"
#include "util/byte_order.h"

namespace espgw::esp {

enum class WireKind : uint8_t { esp, ike, nat_keepalive };

// RFC 3948 2.2: IKE on the ESP-in-UDP port starts with 4 zero bytes where ESP has its SPI
// (SPI 0 is never valid). RFC 3948 2.3: a NAT keepalive is the single byte 0xFF.
inline constexpr size_t kNonEspMarkerLength = 4;
inline constexpr uint8_t kNatKeepalive = 0xFF;

// What a UDP datagram on the ESP-in-UDP port carries, from its payload alone. Inline: the
// gateway's UDP readers ask for every datagram.
inline WireKind udp_payload_kind(std::span<const uint8_t> payload) {
  if (payload.size() == 1 && payload[0] == kNatKeepalive) return WireKind::nat_keepalive;
  if (payload.size() >= kNonEspMarkerLength && load_be32(payload.data()) == 0) return WireKind::ike;
  return WireKind::esp;
}

struct WireInfo {
  WireKind kind = WireKind::esp;
  IpAddress source;
  IpAddress destination;
  std::optional<UdpEncapsulation> udp;  // ports as seen on this packet
  size_t payload_offset = 0;            // ESP starts at the SPI; IKE after the non-ESP marker
  size_t payload_length = 0;
  uint8_t traffic_class = 0;  // the outer header's DSCP and ECN
};

// Parses without modifying. Outer fragments are refused (the kernel reassembles before a
// socket sees them; a raw capture may not). The UDP checksum is left to the kernel.
DropReason parse_wire(std::span<const uint8_t> packet, WireInfo& info);

}  // namespace espgw::esp
