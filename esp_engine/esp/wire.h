// Outer-header parsing for packets as they arrive from the WAN: IPv4 or IPv6, then raw
// ESP (protocol 50) or UDP. On UDP, RFC 3948 demultiplexing: a 4-byte zero non-ESP marker
// means IKE, a single 0xFF byte is a NAT keepalive, anything else is ESP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "esp/counters.h"
#include "esp/decap.h"
#include "esp/drop_reason.h"
#include "esp/ip_address.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"

namespace espgw::esp {

enum class WireKind : uint8_t { esp, ike, nat_keepalive };

struct WireInfo {
  WireKind kind = WireKind::esp;
  IpAddress source;
  IpAddress destination;
  std::optional<UdpEncapsulation> udp;  // ports as seen on this packet
  size_t payload_offset = 0;            // ESP starts at the SPI; IKE after the non-ESP marker
  size_t payload_length = 0;
};

// Parses without modifying. Outer fragments are refused (the kernel reassembles before a
// socket sees them; a raw capture may not). The UDP checksum is left to the kernel.
DropReason parse_wire(std::span<const uint8_t> packet, WireInfo& info);

struct WireDecapResult {
  DropReason reason = DropReason::none;
  WireKind kind = WireKind::esp;
};

// Parses the outer headers and, for ESP, decapsulates. On success `packet` holds the inner
// packet (kind esp) or the IKE message (kind ike). Drops before an SA is known, keepalives
// included, are counted on `engine`.
WireDecapResult decapsulate_wire(const InboundSaTable& table, EngineCounters& engine,
                                 PacketBuffer& packet, WireInfo* info = nullptr);

}  // namespace espgw::esp
