#include "xfrm/flow_key.h"

#include "util/byte_order.h"

namespace espgw::xfrm {

namespace {

constexpr uint8_t kHopByHop = 0, kTcp = 6, kUdp = 17, kRouting = 43, kFragment = 44,
                  kDestinationOptions = 60, kSctp = 132, kUdpLite = 136;

bool carries_ports(uint8_t protocol) {
  return protocol == kTcp || protocol == kUdp || protocol == kSctp || protocol == kUdpLite;
}

// Every protocol with ports puts the source and destination port in its first 4 bytes.
bool read_ports(std::span<const uint8_t> p, size_t offset, FlowKey& key) {
  if (p.size() < offset + 4) return false;
  key.ports_known = true;
  key.source_port = load_be16(&p[offset]);
  key.destination_port = load_be16(&p[offset + 2]);
  return true;
}

std::optional<FlowKey> ipv4_key(std::span<const uint8_t> p) {
  const size_t header_length = (size_t{p[0]} & 0x0F) * 4;
  if (header_length < 20 || p.size() < header_length) return std::nullopt;
  FlowKey key;
  key.source = esp::IpAddress::v4(&p[12]);
  key.destination = esp::IpAddress::v4(&p[16]);
  key.protocol = p[9];
  // More-fragments flag or a non-zero offset: a piece of a larger datagram.
  const bool fragment = (load_be16(&p[6]) & 0x3FFF) != 0;
  if (!fragment && carries_ports(key.protocol) && !read_ports(p, header_length, key))
    return std::nullopt;
  return key;
}

std::optional<FlowKey> ipv6_key(std::span<const uint8_t> p) {
  FlowKey key;
  key.source = esp::IpAddress::v6(&p[8]);
  key.destination = esp::IpAddress::v6(&p[24]);
  uint8_t next = p[6];
  size_t offset = 40;
  // Each extension header is at least 8 bytes long, so the walk ends within the packet.
  for (;;) {
    if (next == kHopByHop || next == kRouting || next == kDestinationOptions) {
      if (p.size() < offset + 8) return std::nullopt;
      const size_t length = (size_t{p[offset + 1]} + 1) * 8;
      if (p.size() < offset + length) return std::nullopt;
      next = p[offset];
      offset += length;
    } else if (next == kFragment) {
      if (p.size() < offset + 8) return std::nullopt;
      const bool atomic = (load_be16(&p[offset + 2]) & 0xFFF9) == 0;  // offset 0, no M flag
      next = p[offset];
      offset += 8;
      if (!atomic) {
        // What follows the fragment header of a non-initial piece is payload, not
        // headers, so the protocol is taken from the fragment header in every piece.
        key.protocol = next;
        return key;
      }
    } else {
      break;
    }
  }
  key.protocol = next;
  if (carries_ports(next) && !read_ports(p, offset, key)) return std::nullopt;
  return key;
}

}  // namespace

FlowKey FlowKey::reversed() const {
  FlowKey r = *this;
  r.source = destination;
  r.destination = source;
  r.source_port = destination_port;
  r.destination_port = source_port;
  return r;
}

std::optional<FlowKey> flow_key(std::span<const uint8_t> packet) {
  if (packet.size() >= 20 && packet[0] >> 4 == 4) return ipv4_key(packet);
  if (packet.size() >= 40 && packet[0] >> 4 == 6) return ipv6_key(packet);
  return std::nullopt;
}

}  // namespace espgw::xfrm
